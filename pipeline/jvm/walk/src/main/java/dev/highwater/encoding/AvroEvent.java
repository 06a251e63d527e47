package dev.highwater.encoding;

import java.util.Arrays;
import java.util.HashSet;

/**
 * A Debezium event's Avro (its value's writer schema, compiled once) read straight into the
 * walk's envelope: its images by {@link AvroImage} (columns from their binary values by their
 * Connect kinds), its op, its source and transaction straight into the values {@link
 * EventPlace} places it by ({@link AvroSource}; of a shape that does not know, as {@link
 * AvroJson} writes them), with no JSON of the whole event written and read again. It writes what reading the event through JSON writes ({@link AvroJson}, then
 * {@link Debezium}), byte for byte, and takes what that takes. A schema it cannot say so of has
 * no plan ({@link #of}: null), and its events are read through JSON as before: images that are
 * not one record or null, columns other than the Connect schema's, a semantic column whose Avro
 * type is not the one Connect writes for it.
 */
final class AvroEvent {
  private static final int FIELD = 1; // a field's depth as AvroJson reads the whole value (0)
  private static final int OTHER = 0;
  private static final int BEFORE = 1;
  private static final int AFTER = 2;
  private static final int OP = 3;
  private static final int SOURCE = 4;
  private static final int TRANSACTION = 5;
  private static final byte[][] OPS = Members.names("\"c\"", "\"r\"", "\"u\"", "\"d\"");

  private final AvroJson.Node[] fields; // the value record's
  private final int[] roles; // each field's: BEFORE, AFTER, ...
  private final AvroImage[] images; // each field's image (BEFORE, AFTER), else null
  private final Kept[] kept; // each field's members EventPlace reads (SOURCE, TRANSACTION)
  private final AvroSource[] direct; // the same read straight, where every such field can be

  /** A task's buffers (a plan is shared by the executor's tasks). */
  static final class Scratch {
    final Encoding.Buffer after = new Encoding.Buffer();
    final Encoding.Buffer before = new Encoding.Buffer();
    final Encoding.Buffer meta = new Encoding.Buffer(); // source, then transaction, as JSON
    final Encoding.Buffer other = new Encoding.Buffer(); // the op, as JSON
    final Encoding.Buffer json = new Encoding.Buffer(); // a column that may hold a map
    final AvroRow.Scratch rows = new AvroRow.Scratch(); // images written as Avro
    final int[] at = new int[1];
  }

  private AvroEvent(
      AvroJson.Node[] fields, int[] roles, AvroImage[] images, Kept[] kept, AvroSource[] direct) {
    this.fields = fields;
    this.roles = roles;
    this.images = images;
    this.kept = kept;
    this.direct = direct;
  }

  /**
   * The plan of a value schema ({@code typed}: its {after, before} columns by the Connect-style
   * schema), or null: its events are read through JSON.
   */
  static AvroEvent of(AvroJson.Node value, Connect.Column[][] typed) {
    if (value.type != AvroJson.Type.RECORD || typed == null || !AvroImage.plainNames(value)) {
      return null;
    }
    int n = value.children.length;
    int[] roles = new int[n];
    AvroImage[] images = new AvroImage[n];
    Kept[] kept = new Kept[n];
    AvroSource[] direct = new AvroSource[n];
    boolean straight = true;
    for (int k = 0; k < n; k++) {
      roles[k] = role(value.names[k]);
      if (roles[k] == AFTER || roles[k] == BEFORE) {
        images[k] = AvroImage.of(value.children[k], typed[roles[k] == AFTER ? 0 : 1]);
        if (images[k] == null) {
          return null;
        }
      } else if (roles[k] == SOURCE || roles[k] == TRANSACTION) {
        byte[][] read = roles[k] == SOURCE ? EventPlace.SOURCE : EventPlace.TRANSACTION;
        kept[k] = Kept.of(value.children[k], read);
        direct[k] = AvroSource.of(value.children[k], read, roles[k] == SOURCE ? 0 : EventPlace.TX_ID);
        straight &= direct[k] != null;
      }
    }
    return new AvroEvent(value.children, roles, images, kept, straight ? direct : null);
  }

  /**
   * A source or transaction field written as JSON with only the members {@link EventPlace}
   * reads of it (of a record, or of a union's record branches); the others read past by
   * {@link AvroJson#skip}, so an event is taken exactly when written whole it would be.
   */
  private static final class Kept {
    private final AvroJson.Node type;
    private final int[][] written; // per branch (a record: one), per field: its name's place
    // in the names EventPlace reads, or -1 (not written); a branch null: written whole

    private Kept(AvroJson.Node type, int[][] written) {
      this.type = type;
      this.written = written;
    }

    static Kept of(AvroJson.Node type, byte[][] read) {
      boolean union = type.type == AvroJson.Type.UNION;
      AvroJson.Node[] branches = union ? type.children : new AvroJson.Node[] {type};
      int[][] written = new int[branches.length][];
      for (int b = 0; b < branches.length; b++) {
        AvroJson.Node branch = branches[b];
        if (branch.type == AvroJson.Type.RECORD && AvroImage.plainNames(branch)) {
          written[b] = new int[branch.names.length];
          for (int f = 0; f < branch.names.length; f++) {
            byte[] quoted = branch.names[f];
            written[b][f] = -1;
            for (int k = 0; k < read.length; k++) {
              if (Arrays.equals(quoted, 1, quoted.length - 1, read[k], 0, read[k].length)) {
                written[b][f] = k;
              }
            }
          }
        }
      }
      return new Kept(type, written);
    }

    /**
     * As {@link AvroJson#read} at {@code depth}, the members not read by EventPlace left out;
     * where each is written goes to {@code found} (as {@link Members#read} would find them),
     * {@code found[0]} -2 when the datum was written whole (not a record it knows).
     */
    boolean read(byte[] b, int[] at, Encoding.Buffer o, int depth, int[] found) {
      AvroJson.Node n = type;
      int branch = 0;
      if (n.type == AvroJson.Type.UNION) {
        long v = AvroJson.varint(b, at);
        if (at[0] < 0 || v < 0 || v >= n.children.length) {
          return false;
        }
        branch = (int) v;
        n = n.children[branch];
        depth++;
      }
      int[] fields = written[branch];
      Arrays.fill(found, -1);
      if (fields == null) {
        found[0] = -2;
        return AvroJson.read(n, b, at, o, depth);
      }
      if (depth > AvroJson.MAX_DEPTH) {
        return false;
      }
      o.put('{');
      boolean first = true;
      for (int f = 0; f < fields.length; f++) {
        int k = fields[f];
        if (k < 0) {
          if (!AvroJson.skip(n.children[f], b, at, depth + 1)) {
            return false;
          }
          continue;
        }
        if (!first) {
          o.put(',');
        }
        first = false;
        o.put(n.names[f], 0, n.names[f].length);
        o.put(':');
        found[2 * k] = o.size;
        if (!AvroJson.read(n.children[f], b, at, o, depth + 1)) {
          return false;
        }
        found[2 * k + 1] = o.size;
      }
      o.put('}');
      return true;
    }
  }

  /** Whether {@link #key} reads {@code key}'s data as JSON would (a record of fields, no map). */
  static boolean keyable(AvroJson.Node key) {
    return key.type == AvroJson.Type.RECORD
        && key.children.length > 0
        && AvroImage.plainNames(key)
        && !AvroImage.hasMap(key, new HashSet<>()); // JSON refuses a name twice, which a map may hold
  }

  /** {@code key}'s datum (a {@link #keyable} record) at {@code b[5]} as a JSON array. */
  static boolean key(AvroJson.Node key, byte[] b, Encoding.Buffer o, int[] at) {
    at[0] = 5;
    o.put('[');
    for (int k = 0; k < key.children.length; k++) {
      if (k > 0) {
        o.put(',');
      }
      if (!AvroJson.read(key.children[k], b, at, o, FIELD)) {
        return false;
      }
    }
    o.put(']');
    return at[0] == b.length;
  }

  private static int role(byte[] quoted) {
    String name = new String(quoted, 1, quoted.length - 2, java.nio.charset.StandardCharsets.UTF_8);
    switch (name) {
      case "before":
        return BEFORE;
      case "after":
        return AFTER;
      case "op":
        return OP;
      case "source":
        return SOURCE;
      case "transaction":
        return TRANSACTION;
      default:
        return OTHER;
    }
  }

  /**
   * The event at {@code b[5]} (after the wire format's magic byte and id): its envelope written
   * to {@code o} ({@code diff}: with before), its time and places to {@code out} by {@code
   * place}; false: not taken (the Python loop decides).
   */
  boolean read(
      byte[] b, Encoding.Buffer o, Scratch s, EventPlace place, boolean diff, Encoding.Encoded out) {
    if (!read(b, s, place, null, out)) {
      return false;
    }
    Envelope.after(o);
    put(o, s.after);
    if (diff) {
      Envelope.before(o);
      put(o, s.before);
    }
    if (out.ts != null) {
      Envelope.updated(o, out.ts);
    }
    return true;
  }

  /**
   * The plan of this event's images into an Avro route's row record ({@code columns}): per
   * field, the {@link AvroRow} of after and (with {@code diff}) before; null where an image has
   * a column the record lacks (its events are read through JSON).
   */
  AvroRow[] rows(AvroField[] columns, boolean diff) {
    AvroRow[] rows = new AvroRow[fields.length];
    for (int k = 0; k < fields.length; k++) {
      if (roles[k] == AFTER || (diff && roles[k] == BEFORE)) {
        rows[k] = AvroRow.of(images[k], columns);
        if (rows[k] == null) {
          return null;
        }
      }
    }
    return rows;
  }

  /**
   * The event's fields read: its images to {@code s.after} and {@code s.before}, as JSON, or
   * where {@code rows} (an Avro route's {@link #rows}) has the field's plan as that route's row
   * record (null written as nothing; before without diff is read as JSON, so taken as {@link
   * Avro} takes it, and not written); the op checked; the source and transaction read by {@code
   * place} into {@code out}. False: not taken.
   */
  boolean read(
      byte[] b, Scratch s, EventPlace place, AvroRow[] rows, Encoding.Encoded out) {
    int[] at = s.at;
    at[0] = 5;
    s.after.reset(); // left empty: the event has no such field (null)
    s.before.reset();
    s.meta.reset();
    int op = 0;
    int source = -1;
    int transaction = -1;
    boolean afterNull = true;
    boolean whole = false; // a source or transaction written whole: EventPlace finds its members
    boolean sourced = false; // read straight: the source was a record
    SourceValues values = place.values;
    if (direct != null) {
      values.reset(b, false);
    }
    for (int k = 0; k < fields.length; k++) {
      int role = roles[k];
      if (role == AFTER || role == BEFORE) {
        Encoding.Buffer image = role == AFTER ? s.after : s.before;
        AvroRow row = rows == null ? null : rows[k];
        boolean read =
            row == null ? images[k].read(b, at, image, s.json) : row.write(b, at, image, s.rows, out);
        if (!read) {
          return false;
        }
        if (role == AFTER) { // an image read as JSON writes null as such
          afterNull = image.size == 0 || (row == null && image.bytes[0] == 'n');
        }
        continue;
      }
      if ((role == SOURCE || role == TRANSACTION) && direct != null) {
        int read = direct[k].read(b, at, values, FIELD);
        if (read < 0) {
          return false;
        }
        sourced |= role == SOURCE && read == 1;
        values.transaction |= role == TRANSACTION && read == 1;
        continue;
      }
      if (role == SOURCE || role == TRANSACTION) {
        if (role == SOURCE) {
          source = s.meta.size;
        } else {
          transaction = s.meta.size;
        }
        int[] found = role == SOURCE ? place.source : place.transaction;
        if (!kept[k].read(b, at, s.meta, FIELD, found)) {
          return false;
        }
        whole |= found[0] == -2;
        continue;
      }
      if (role == OTHER) {
        if (!AvroJson.skip(fields[k], b, at, FIELD)) { // read to be checked, and dropped
          return false;
        }
        continue;
      }
      s.other.reset(); // the op
      if (!AvroJson.read(fields[k], b, at, s.other, FIELD)) {
        return false;
      }
      op = op(s.other);
    }
    if (at[0] != b.length || (op != 'c' && op != 'r' && op != 'u' && op != 'd')) {
      return false;
    }
    boolean placed;
    if (direct != null) {
      placed = sourced && place.place(op == 'r', out);
    } else {
      byte[] meta = Arrays.copyOf(s.meta.bytes, s.meta.size);
      placed =
          whole || source < 0 || meta[source] != '{'
              ? place.read(meta, source, transaction, op == 'r', out)
              : place.readFound(meta, transaction, op == 'r', out);
    }
    return placed && afterNull == (op == 'd');
  }

  /** An image as read, or null where the event had no such field. */
  private static void put(Encoding.Buffer o, Encoding.Buffer image) {
    if (image.size == 0) {
      o.put(Json.NULL, 0, Json.NULL.length);
    } else {
      o.put(image.bytes, 0, image.size);
    }
  }

  /** The op's letter when its JSON is one of "c", "r", "u", "d"; else 0. */
  private static int op(Encoding.Buffer text) {
    for (byte[] letter : OPS) {
      if (Arrays.equals(text.bytes, 0, text.size, letter, 0, letter.length)) {
        return letter[1];
      }
    }
    return 0;
  }
}
