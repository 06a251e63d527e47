package dev.highwater.encoding;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.Arrays;
import java.util.Map;

/**
 * Debezium's change events in JSON ({@code JsonConverter}, with or without schemas), read as
 * pipeline/core/sources/debezium.py reads them and written as the JSON encoder's wrapped
 * envelope ({@code after}, [{@code before},] {@code updated}): the key its fields' values, the
 * time the commit's clock and the event's place in its commit, values by their Connect schema
 * ({@link Connect}). It also gives what the batch keeps per partition: the event's position
 * and its transaction's id and place ({@link Encoded#position}, {@link Encoded#tx}).
 *
 * <p>It takes PostgreSQL's and binlogs' events (a binlog change in a transaction whose END
 * the driver has not read comes out with no time and no value: see {@link EventPlace}) and
 * snapshot reads. Not taken, so the Python loop decides: explicit null payloads, names spelled
 * with escapes, and anything the Python side would read another way or refuse.
 */
final class Debezium implements Encoding {
  private static final long serialVersionUID = 1L;
  private static final byte[][] ENVELOPE = Members.names("schema", "payload");
  private static final byte[][] PAYLOAD =
      Members.names("before", "after", "op", "source", "transaction");

  private final boolean diff; // before is written
  private final Map<String, long[]> commits; // binlogs: each transaction's END's time
  private transient Scratch scratch;

  /** A task's reading state: where members were found, the last schema read and its columns. */
  private static final class Scratch {
    final int[] envelope = new int[2 * ENVELOPE.length + 1];
    final int[] payload = new int[2 * PAYLOAD.length + 1];
    final EventPlace place;
    final byte[][] keySchema = new byte[1][]; // the last key's schema, as it came
    final byte[][] valueSchema = new byte[1][];
    Connect.Column[] after = new Connect.Column[0]; // the last value schema's columns
    Connect.Column[] before = new Connect.Column[0];
    final ObjectMapper json =
        new ObjectMapper().enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);

    Scratch(Map<String, long[]> commits) {
      place = new EventPlace(commits);
    }
  }

  Debezium(byte[][] members, Map<String, long[]> commits) {
    this(Members.has(members, "before"), commits);
  }

  /** {@code diff}: before is written (the JSON encoder's member, or Avro's {@code diff}). */
  Debezium(boolean diff, Map<String, long[]> commits) {
    this.commits = commits;
    this.diff = diff;
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    return encode(key, value, null, out);
  }

  /**
   * A change read as {@link #encode(byte[], byte[], Encoded)} reads JsonConverter's JSON, or,
   * with {@code typed} ({after, before} columns: an Avro writer schema's, {@link DebeziumAvro}),
   * a bare key and payload whose images are read by those columns.
   */
  boolean encode(byte[] key, byte[] value, Connect.Column[][] typed, Encoded out) {
    if (scratch == null) {
      scratch = new Scratch(commits);
    }
    Scratch s = scratch;
    Buffer o = out.buffer;
    o.reset();
    if (!key(key, o, s)) {
      return false;
    }
    out.key = o.copy(0);
    o.reset();
    out.position = null;
    out.tx = null;
    if (!value(value, o, s, typed, out)) {
      return false;
    }
    out.value = out.ts == null ? null : o.copy(0);
    return true;
  }

  /** The key's fields' values, as a JSON array. */
  private static boolean key(byte[] b, Buffer o, Scratch s) {
    int[] f = s.envelope;
    int from = payload(b, f, s.keySchema);
    if (from < 0) {
      return false;
    }
    if (enveloped(f)) {
      remember(b, f[0], f[1], s.keySchema);
    }
    if (b[from] != '{') {
      return false;
    }
    o.put('[');
    Members.Names names = new Members.Names();
    int i = Json.ws(b, from + 1);
    while (i < b.length && b[i] == '"') {
      i = names.read(b, i);
      if (i < 0) {
        return false;
      }
      if (names.count() > 1) {
        o.put(',');
      }
      i = Json.ws(b, i);
      if (i >= b.length || b[i] != ':') {
        return false;
      }
      i = Canonical.value(b, Json.ws(b, i + 1), o, 1);
      i = i < 0 ? -1 : Json.ws(b, i);
      if (i < 0 || i >= b.length) {
        return false;
      }
      if (b[i] == '}') {
        o.put(']');
        return true; // a key of at least one field
      }
      i = b[i] == ',' ? Json.ws(b, i + 1) : -1;
      if (i < 0) {
        return false;
      }
    }
    return false;
  }

  /**
   * Where a key's or value's payload starts (Python's {@code _payload}): the payload of a
   * record that is exactly {schema, payload} (their places in {@code f}), else the record
   * itself; -1 when the record is not one JSON object.
   */
  private static int payload(byte[] b, int[] f, byte[][] cached) {
    int start = Json.ws(b, 0);
    boolean object = start < b.length && b[start] == '{';
    int end = object ? Members.read(b, start, ENVELOPE, f, cached) : -1;
    if (end < 0 || Json.ws(b, end) != b.length) {
      return -1;
    }
    return enveloped(f) ? f[2] : start;
  }

  /** Whether a record's members were exactly schema and payload (Python's {@code _payload}). */
  private static boolean enveloped(int[] f) {
    return f[f.length - 1] == 2 && f[0] >= 0 && f[2] >= 0;
  }

  /**
   * The value: the envelope written to {@code o}, the time and places to {@code out}; {@code
   * given}: a bare payload, its images' columns.
   */
  private boolean value(byte[] b, Buffer o, Scratch s, Connect.Column[][] given, Encoded out) {
    int from = 0;
    Connect.Column[] after = null; // null: the values are kept as they came
    Connect.Column[] before = null;
    if (given != null) {
      after = given[0];
      before = given[1];
    } else {
      int[] f = s.envelope;
      from = payload(b, f, s.valueSchema);
      if (from < 0) {
        return false;
      }
      boolean typed = enveloped(f) && b[f[0]] == '{';
      if (typed && !schema(b, f[0], f[1], s)) {
        return false;
      }
      after = typed ? s.after : null;
      before = typed ? s.before : null;
    }
    int[] p = s.payload;
    if (b[from] != '{' || Members.read(b, from, PAYLOAD, p, null) < 0) {
      return false; // a null payload (a tombstone), or not an object: the Python loop says
    }
    int op = p[4] >= 0 && p[5] - p[4] == 3 && b[p[4]] == '"' ? b[p[4] + 1] : 0;
    if (op != 'c' && op != 'r' && op != 'u' && op != 'd') {
      return false;
    }
    if (!s.place.read(b, p[6], p[8], op == 'r', out)) {
      return false;
    }
    boolean deleted = p[2] < 0 || b[p[2]] == 'n';
    if (deleted != (op == 'd')) {
      return false;
    }
    Envelope.after(o);
    if (!image(b, p[2], p[3], after, o)) {
      return false;
    }
    int mark = o.size;
    Envelope.before(o);
    if (!image(b, p[0], p[1], before, o)) {
      return false; // read whether written or not, as the Python side reads it
    }
    if (!diff) {
      o.size = mark;
    }
    if (out.ts == null) {
      return true; // a binlog change whose END was not read: not written (yet)
    }
    Envelope.updated(o, out.ts);
    return true;
  }

  /** The value schema's columns: the last ones when it is the last schema, else read. */
  private static boolean schema(byte[] b, int from, int to, Scratch s) {
    if (same(b, from, to, s.valueSchema[0])) {
      return s.after != null && s.before != null;
    }
    try {
      JsonNode schema = s.json.readTree(b, from, to - from);
      s.after = Connect.columns(schema, "after");
      s.before = Connect.columns(schema, "before");
    } catch (IOException e) {
      s.after = null;
      s.before = null;
    }
    s.valueSchema[0] = Arrays.copyOfRange(b, from, to);
    return s.after != null && s.before != null;
  }

  private static void remember(byte[] b, int from, int to, byte[][] cached) {
    if (b[from] == '{' && !same(b, from, to, cached[0])) {
      cached[0] = Arrays.copyOfRange(b, from, to);
    }
  }

  private static boolean same(byte[] b, int from, int to, byte[] cached) {
    return cached != null && Arrays.equals(b, from, to, cached, 0, cached.length);
  }

  /**
   * A row image ({@code [from, to)}; absent: from -1) written to {@code o}: null, or its
   * columns, read by the schema's {@code columns} (in its order, all of them) or, without a
   * schema (null) or with no columns named there, as they came.
   */
  private static boolean image(byte[] b, int from, int to, Connect.Column[] columns, Buffer o) {
    if (from < 0 || b[from] == 'n') {
      o.put(Json.NULL, 0, Json.NULL.length);
      return true;
    }
    if (b[from] != '{') {
      return false;
    }
    if (columns == null || columns.length == 0) {
      return Canonical.value(b, from, o, 1) == to;
    }
    o.put('{');
    int i = Json.ws(b, from + 1);
    for (int k = 0; k < columns.length; k++) {
      Connect.Column column = columns[k];
      int name = i;
      i = i < to && b[i] == '"' ? Json.string(b, i, false) : -1;
      if (i < 0 || !Arrays.equals(b, name + 1, i - 1, column.name, 0, column.name.length)) {
        return false;
      }
      o.put(b, name, i);
      o.put(':');
      i = Json.ws(b, i);
      i = i < to && b[i] == ':' ? Connect.value(column, b, Json.ws(b, i + 1), o) : -1;
      i = i < 0 ? -1 : Json.ws(b, i);
      boolean last = k == columns.length - 1;
      if (i < 0 || i >= to || b[i] != (last ? '}' : ',')) {
        return false;
      }
      o.put(b[i]);
      if (last) {
        return i + 1 == to;
      }
      i = Json.ws(b, i + 1);
    }
    return false;
  }
}
