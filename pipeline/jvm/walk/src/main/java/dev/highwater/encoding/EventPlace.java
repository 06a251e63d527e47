package dev.highwater.encoding;

import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * Where the source put a Debezium event (pipeline/core/sources/debezium.py's {@code Place},
 * {@code at}, {@code _in_transaction}): its time (its commit's clock, below its unit its place
 * in the commit), its position, its transaction's id and place, for PostgreSQL's events,
 * binlogs' (MySQL, MariaDB) and snapshot reads. A binlog change in a transaction has its END's
 * time; one whose END the driver has not read has none ({@code out.ts} null): the walk stops
 * there unless it is a re-send, as the Python loop does.
 */
final class EventPlace {
  private static final long LOGICAL = 10_000_000_000L; // the logical part's ten digits
  static final byte[][] SOURCE = // the members of source it reads
      Members.names(
          "ts_us", "ts_ms", "ts_ns", "snapshot", "connector", "sequence", "file", "pos", "row");
  private static final long[] NANOS = {1_000, 1_000_000, 1}; // per unit of ts_us, ts_ms, ts_ns
  static final byte[][] TRANSACTION = Members.names("id"); // of transaction
  private static final long ROWS = 100_000; // rows of one binlog event
  private static final long IN_COMMIT = 1_000_000 * LOGICAL; // an END's millisecond

  static final int TX_ID = SOURCE.length; // the transaction's id, after the source's members
  private static final byte[] POSTGRESQL_UTF8 = Members.utf8("postgresql");
  private static final byte[] MYSQL_UTF8 = Members.utf8("mysql");
  private static final byte[] MARIADB_UTF8 = Members.utf8("mariadb");
  private static final byte[] FALSE_UTF8 = Members.utf8("false");

  final int[] source = new int[2 * SOURCE.length + 1]; // where each of SOURCE is (from, to)
  final int[] transaction = new int[2 * TRANSACTION.length + 1]; // ... each of TRANSACTION
  final SourceValues values = new SourceValues(SOURCE.length + 1); // what they are
  private final Encoding.Buffer text = new Encoding.Buffer();
  private final Map<String, long[]> commits; // transaction -> its END's time (binlogs)

  /** {@code commits}: each transaction's END's time, as the driver read them (binlogs). */
  EventPlace(Map<String, long[]> commits) {
    this.commits = commits;
  }

  /**
   * The event's time (its commit's clock; below its unit, its place in the commit), its
   * position and its transaction's id and place, as {@code debezium.py}'s {@code change}: from
   * the JSON source object at {@code b[from]} and the transaction at {@code b[tx]}.
   */
  boolean read(byte[] b, int from, int tx, boolean read, Encoding.Encoded out) {
    if (from < 0 || b[from] != '{' || Members.read(b, from, SOURCE, source, null) < 0) {
      return false;
    }
    boolean unread = tx >= 0 && b[tx] == '{' && Members.read(b, tx, TRANSACTION, transaction, null) < 0;
    if (unread) {
      transaction[0] = -1;
    }
    return fromJson(b, tx, unread) && place(read, out);
  }

  /**
   * As {@link #read}, the source's members already found in {@code b} ({@link #source}: where
   * each of {@link #SOURCE} is, as {@link Members#read} finds them) and, where {@code tx} is an
   * object, the transaction's ({@link #transaction}): {@link AvroEvent} writes only those.
   */
  boolean readFound(byte[] b, int tx, boolean read, Encoding.Encoded out) {
    return fromJson(b, tx, false) && place(read, out);
  }

  /** {@link #values} from the members found in JSON ({@code unread}: the transaction's not). */
  private boolean fromJson(byte[] b, int tx, boolean unread) {
    SourceValues v = values;
    v.reset(b, true);
    for (int k = 0; k < SOURCE.length; k++) {
      v.json(k, b, source[2 * k], source[2 * k + 1]);
    }
    if (tx >= 0 && b[tx] == '{') {
      v.transaction = true;
      v.json(TX_ID, b, transaction[0], transaction[1]);
      if (unread) {
        v.kind[TX_ID] = SourceValues.OTHER; // a transaction without an id to take
      }
    }
    return true;
  }

  /** As {@link #read}, the members' {@link #values} given (read from Avro straight). */
  boolean place(boolean read, Encoding.Encoded out) {
    SourceValues v = values;
    long clock = -1;
    long nanos = 0;
    for (int k = 0; k < NANOS.length && nanos == 0; k++) {
      if (v.given(k)) {
        clock = v.integer(k);
        nanos = NANOS[k];
      }
    }
    if (clock < 0 || clock > Long.MAX_VALUE / nanos) {
      return false;
    }
    int snapshot = read ? 1 : snapshot(v);
    if (snapshot < 0) {
      return false;
    }
    boolean binlog = v.is(4, MYSQL_UTF8) || v.is(4, MARIADB_UTF8);
    if (snapshot == 1) { // a snapshot's read: before the stream, no place
      if (binlog || v.is(4, POSTGRESQL_UTF8)) {
        return false; // timed by what its partition passed (debezium.py's snapshot_read)
      }
      out.ts = new long[] {clock * nanos, 0};
      return true;
    }
    if (binlog) {
      return binlog(v, clock, nanos, out);
    }
    if (!v.is(4, POSTGRESQL_UTF8)) {
      return false; // a connector without positions the Python side knows: it names it
    }
    long[] place = sequence(v, text);
    if (place == null) {
      return false;
    }
    boolean first = place[0] < 0; // a stream's first transaction: placed (LSN, LSN)
    long room = nanos * LOGICAL;
    long order = Math.min(Math.max(place[1] - (first ? 0 : place[0]) + room / 2, 0), room - 1);
    long wall = clock * nanos + order / LOGICAL;
    if (wall < 0) {
      return false;
    }
    out.ts = new long[] {wall, order % LOGICAL};
    out.position = first ? new long[] {place[1], place[1]} : place;
    return transaction(v, place[1], out);
  }

  /**
   * A binlog's place ({@code _binlog_place}): position (file number, pos, row), within its
   * transaction pos * ROWS + row; its time its END's, below the millisecond the file's last
   * digits and the position; without transaction metadata, the statement's clock.
   */
  private boolean binlog(SourceValues v, long clock, long nanos, Encoding.Encoded out) {
    long files = fileNumber(v, 6);
    long pos = v.kind[7] == SourceValues.ABSENT ? -1 : v.integer(7);
    long row = v.kind[8] == SourceValues.ABSENT ? -1 : v.integer(8);
    if (files < 0 || pos < 0 || row < 0 || row >= ROWS || pos > (Long.MAX_VALUE >> 1) / ROWS) {
      return false;
    }
    long order = ((files % 1000) << 32) + pos;
    out.position = new long[] {files, pos, row};
    if (!transaction(v, pos * ROWS + row, out)) {
      return false;
    }
    if (out.tx == null) {
      long room = nanos * LOGICAL;
      long o = Math.min(order, room - 1);
      out.ts = new long[] {clock * nanos + o / LOGICAL, o % LOGICAL};
      return true;
    }
    long[] end = commits.get(out.tx);
    if (end == null) {
      out.ts = null; // its END not read yet
      return true;
    }
    long o = Math.min(order, IN_COMMIT - 1);
    if (end[0] > Long.MAX_VALUE - o / LOGICAL) {
      return false;
    }
    out.ts = new long[] {end[0] + o / LOGICAL, o % LOGICAL};
    return true;
  }

  /** A binlog file name's number: the ASCII digits after its last dot (or all of it). */
  private static long fileNumber(SourceValues v, int k) {
    if (!v.plainText(k)) {
      return -1;
    }
    byte[] b = v.bytes;
    int end = v.to[k];
    int start = end;
    while (start > v.from[k] && b[start - 1] != '.') {
      start--;
    }
    if (end - start < 1 || end - start > 18) {
      return -1;
    }
    long n = 0;
    for (int i = start; i < end; i++) {
      if (b[i] < '0' || b[i] > '9') {
        return -1;
      }
      n = n * 10 + b[i] - '0';
    }
    return n;
  }

  /** source.snapshot: 1 a snapshot, 0 not (absent, null, false, "false"), -1 not told here. */
  private static int snapshot(SourceValues v) {
    switch (v.kind[3]) {
      case SourceValues.ABSENT:
      case SourceValues.NULL:
      case SourceValues.FALSE:
        return 0;
      case SourceValues.TEXT:
        if (v.escaped[3]) {
          return -1; // escapes: the Python side may read "false"
        }
        return v.is(3, FALSE_UTF8) ? 0 : 1;
      case SourceValues.TRUE:
      case SourceValues.OTHER:
        return 1;
      default:
        return -1; // a number may be 0
    }
  }

  /**
   * PostgreSQL's source.sequence, {@code "[\"<last commit LSN>\",\"<LSN>\"]"}: both LSNs, the
   * first -1 where it is null (a stream's first transaction).
   */
  private static long[] sequence(SourceValues v, Encoding.Buffer text) {
    if (v.kind[5] != SourceValues.TEXT) {
      return null;
    }
    byte[] t = v.bytes;
    int i = v.from[5];
    int n = v.to[5];
    if (v.json && v.escaped[5]) { // JSON's escapes undone first
      text.reset();
      if (Canonical.escaped(v.bytes, v.from[5] - 1, text, false) < 0) {
        return null;
      }
      t = text.bytes;
      i = 0;
      n = text.size;
    }
    long[] pair = new long[2];
    i = Json.ws(t, i, n);
    if (i >= n || t[i] != '[') {
      return null;
    }
    for (int k = 0; k < 2; k++) {
      i = Json.ws(t, i + 1, n);
      int end;
      if (k == 0 && i + 4 <= n && Json.literal(t, i, Json.NULL) == i + 4) {
        end = i + 4; // no last commit yet (a stream's first transaction): -1
        pair[0] = -1;
      } else if (i < n && t[i] == '"') {
        end = i + 1;
        long lsn = 0;
        while (end < n && t[end] >= '0' && t[end] <= '9') {
          lsn = lsn * 10 + t[end] - '0';
          end++;
        }
        if (end >= n || t[end] != '"' || end - i - 1 < 1 || end - i - 1 > 18) {
          return null;
        }
        pair[k] = lsn;
        end++;
      } else {
        end = i < n ? Json.number(t, i) : -1;
        pair[k] = end < 0 || end > n ? -1 : Connect.integer(t, i, end);
        if (pair[k] < 0) {
          return null;
        }
      }
      i = Json.ws(t, end, n);
      if (i >= n || t[i] != (k == 0 ? ',' : ']')) {
        return null;
      }
    }
    return Json.ws(t, i + 1, n) >= n ? pair : null;
  }

  /** The change's transaction, when the event says which: its id (as the log keys it), place. */
  private static boolean transaction(SourceValues v, long within, Encoding.Encoded out) {
    if (!v.transaction) {
      return true; // transaction metadata off
    }
    if (!v.plainText(TX_ID)) {
      return false;
    }
    byte[] b = v.bytes;
    for (int k = v.from[TX_ID]; k < v.to[TX_ID]; k++) {
      if (b[k] < 0) {
        return false; // non-ASCII: Python's isdigit() reads more digits than ASCII's
      }
    }
    String id =
        new String(b, v.from[TX_ID], v.to[TX_ID] - v.from[TX_ID], StandardCharsets.US_ASCII);
    int colon = id.indexOf(':');
    boolean pg = colon > 0 && digits(id, 0, colon) && digits(id, colon + 1, id.length());
    out.tx = pg ? id.substring(0, colon) : id; // PostgreSQL's <xid>:<lsn>: the xid
    out.within = within;
    return true;
  }

  private static boolean digits(String text, int from, int to) {
    if (from >= to) {
      return false;
    }
    for (int k = from; k < to; k++) {
      if (text.charAt(k) < '0' || text.charAt(k) > '9') {
        return false;
      }
    }
    return true;
  }

}
