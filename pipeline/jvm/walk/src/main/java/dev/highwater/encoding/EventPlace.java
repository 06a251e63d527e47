package dev.highwater.encoding;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
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
  private static final byte[] POSTGRESQL = Members.utf8("\"postgresql\"");
  private static final byte[] MYSQL = Members.utf8("\"mysql\"");
  private static final byte[] MARIADB = Members.utf8("\"mariadb\"");
  private static final long ROWS = 100_000; // rows of one binlog event
  private static final long IN_COMMIT = 1_000_000 * LOGICAL; // an END's millisecond
  private static final byte[] FALSE_TEXT = Members.utf8("\"false\"");

  final int[] source = new int[2 * SOURCE.length + 1]; // where each of SOURCE is (from, to)
  final int[] transaction = new int[2 * TRANSACTION.length + 1]; // ... each of TRANSACTION
  private boolean found; // the members were found by the caller ({@link #readFound})
  private final Encoding.Buffer text = new Encoding.Buffer();
  private final Map<String, long[]> commits; // transaction -> its END's time (binlogs)

  /** {@code commits}: each transaction's END's time, as the driver read them (binlogs). */
  EventPlace(Map<String, long[]> commits) {
    this.commits = commits;
  }

  /**
   * The event's time (its commit's clock; below its unit, its place in the commit), its
   * position and its transaction's id and place, as {@code debezium.py}'s {@code change}.
   */
  boolean read(byte[] b, int from, int tx, boolean read, Encoding.Encoded out) {
    if (from < 0 || b[from] != '{' || Members.read(b, from, SOURCE, source, null) < 0) {
      return false;
    }
    found = false;
    return place(b, tx, read, out);
  }

  /**
   * As {@link #read}, the source's members already found in {@code b} ({@link #source}: where
   * each of {@link #SOURCE} is, as {@link Members#read} finds them) and, where {@code tx} is an
   * object, the transaction's ({@link #transaction}): {@link AvroEvent} writes only those.
   */
  boolean readFound(byte[] b, int tx, boolean read, Encoding.Encoded out) {
    found = true;
    return place(b, tx, read, out);
  }

  private boolean place(byte[] b, int tx, boolean read, Encoding.Encoded out) {
    int[] src = source;
    long clock = -1;
    long nanos = 0;
    for (int k = 0; k < NANOS.length && nanos == 0; k++) {
      if (src[2 * k] >= 0 && b[src[2 * k]] != 'n') {
        clock = Connect.integer(b, src[2 * k], src[2 * k + 1]);
        nanos = NANOS[k];
      }
    }
    if (clock < 0 || clock > Long.MAX_VALUE / nanos) {
      return false;
    }
    int snapshot = read ? 1 : snapshot(b, src[6], src[7]);
    if (snapshot < 0) {
      return false;
    }
    if (snapshot == 1) { // a snapshot's read: before the stream, no place
      if (is(b, src, 4, POSTGRESQL) || is(b, src, 4, MYSQL) || is(b, src, 4, MARIADB)) {
        return false; // timed by what its partition passed (debezium.py's snapshot_read)
      }
      out.ts = new long[] {clock * nanos, 0};
      return true;
    }
    if (is(b, src, 4, MYSQL) || is(b, src, 4, MARIADB)) {
      return binlog(b, src, clock, nanos, tx, out);
    }
    if (!is(b, src, 4, POSTGRESQL)) {
      return false; // a connector without positions the Python side knows: it names it
    }
    long[] place = sequence(b, src[10], text);
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
    return transaction(b, tx, place[1], out);
  }

  private static boolean is(byte[] b, int[] found, int slot, byte[] text) {
    int from = found[2 * slot];
    return from >= 0 && Arrays.equals(b, from, found[2 * slot + 1], text, 0, text.length);
  }

  /**
   * A binlog's place ({@code _binlog_place}): position (file number, pos, row), within its
   * transaction pos * ROWS + row; its time its END's, below the millisecond the file's last
   * digits and the position; without transaction metadata, the statement's clock.
   */
  private boolean binlog(
      byte[] b, int[] src, long clock, long nanos, int tx, Encoding.Encoded out) {
    long files = fileNumber(b, src[12], src[13]);
    long pos = src[14] < 0 ? -1 : Connect.integer(b, src[14], src[15]);
    long row = src[16] < 0 ? -1 : Connect.integer(b, src[16], src[17]);
    if (files < 0 || pos < 0 || row < 0 || row >= ROWS || pos > (Long.MAX_VALUE >> 1) / ROWS) {
      return false;
    }
    long order = ((files % 1000) << 32) + pos;
    out.position = new long[] {files, pos, row};
    if (!transaction(b, tx, pos * ROWS + row, out)) {
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
  private static long fileNumber(byte[] b, int from, int to) {
    if (from < 0 || b[from] != '"' || Json.string(b, from, false) != to) {
      return -1;
    }
    int start = to - 1;
    while (start > from + 1 && b[start - 1] != '.') {
      start--;
    }
    if (to - 1 - start < 1 || to - 1 - start > 18) {
      return -1;
    }
    long n = 0;
    for (int k = start; k < to - 1; k++) {
      if (b[k] < '0' || b[k] > '9') {
        return -1;
      }
      n = n * 10 + b[k] - '0';
    }
    return n;
  }

  /** source.snapshot: 1 a snapshot, 0 not (absent, null, false, "false"), -1 not told here. */
  private static int snapshot(byte[] b, int from, int to) {
    if (from < 0 || b[from] == 'n' || b[from] == 'f') {
      return 0;
    }
    if (b[from] == '"') {
      if (Json.string(b, from, false) != to) {
        return -1; // escapes: the Python side may read "false"
      }
      return Arrays.equals(b, from, to, FALSE_TEXT, 0, FALSE_TEXT.length) ? 0 : 1;
    }
    return b[from] == 't' || b[from] == '{' || b[from] == '[' ? 1 : -1; // a number may be 0
  }

  /**
   * PostgreSQL's source.sequence, {@code "[\"<last commit LSN>\",\"<LSN>\"]"}: both LSNs, the
   * first -1 where it is null (a stream's first transaction).
   */
  private static long[] sequence(byte[] b, int from, Encoding.Buffer text) {
    text.reset();
    if (from < 0 || b[from] != '"' || Canonical.escaped(b, from, text, false) < 0) {
      return null;
    }
    byte[] t = text.copy(0);
    int n = t.length;
    int i = Json.ws(t, 0);
    if (i >= n || t[i] != '[') {
      return null;
    }
    long[] pair = new long[2];
    for (int k = 0; k < 2; k++) {
      i = Json.ws(t, i + 1);
      int end;
      if (k == 0 && i + 4 <= n && Json.literal(t, i, Json.NULL) == i + 4) {
        end = i + 4; // no last commit yet (a stream's first transaction): -1
        pair[0] = -1;
      } else if (i < n && t[i] == '"') {
        end = i + 1;
        while (end < n && t[end] >= '0' && t[end] <= '9') {
          end++;
        }
        if (end >= n || t[end] != '"' || end - i - 1 < 1 || end - i - 1 > 18) {
          return null;
        }
        pair[k] = Long.parseLong(new String(t, i + 1, end - i - 1, StandardCharsets.US_ASCII));
        end++;
      } else {
        end = i < n ? Json.number(t, i) : -1;
        pair[k] = end < 0 || end > n ? -1 : Connect.integer(t, i, end);
        if (pair[k] < 0) {
          return null;
        }
      }
      i = Json.ws(t, end);
      if (i >= n || t[i] != (k == 0 ? ',' : ']')) {
        return null;
      }
    }
    return Json.ws(t, i + 1) >= n ? pair : null;
  }

  /** The change's transaction, when the event says which: its id (as the log keys it), place. */
  private boolean transaction(byte[] b, int from, long within, Encoding.Encoded out) {
    if (from < 0 || b[from] != '{') {
      return true; // transaction metadata off
    }
    int[] t = transaction;
    if ((!found && Members.read(b, from, TRANSACTION, t, null) < 0) || t[0] < 0 || b[t[0]] != '"') {
      return false;
    }
    int to = Json.string(b, t[0], false);
    if (to < 0) {
      return false;
    }
    for (int k = t[0] + 1; k < to - 1; k++) {
      if (b[k] < 0) {
        return false; // non-ASCII: Python's isdigit() reads more digits than ASCII's
      }
    }
    String id = new String(b, t[0] + 1, to - t[0] - 2, StandardCharsets.US_ASCII);
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
