package dev.highwater.encoding;

import java.math.BigInteger;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;

/**
 * A Debezium event's Avro (its value's writer schema, compiled once) read straight into the
 * walk's envelope: each image's columns from their binary values by their Connect kinds (a
 * decimal from its bytes, a timestamp from its long), with no JSON written and read again in
 * between. It writes what reading the event through JSON writes ({@link AvroJson}, then {@link
 * Debezium}), byte for byte, and takes what that takes. A schema it cannot say so of has no
 * plan ({@link #of}: null), and its events are read through JSON as before: images that are not
 * one record or null, columns other than the Connect schema's, a semantic column whose Avro
 * type is not the one Connect writes for it. A column that can hold a map is written as JSON
 * and read again ({@link Canonical}: JSON refuses a name twice, which an Avro map may hold).
 */
final class AvroEvent {
  // depths as AvroJson reads the whole value record (0): its fields 1, an image's columns 2
  // (3 when the image is a union's branch)
  private static final int FIELD = 1;
  private static final int OTHER = 0;
  private static final int BEFORE = 1;
  private static final int AFTER = 2;
  private static final int OP = 3;
  private static final int SOURCE = 4;
  private static final int TRANSACTION = 5;
  private static final byte[][] OPS = Members.names("\"c\"", "\"r\"", "\"u\"", "\"d\"");

  private final AvroJson.Node[] fields; // the value record's
  private final int[] roles; // each field's: BEFORE, AFTER, ...
  private final Image[] images; // each field's image (BEFORE, AFTER), else null

  /** A row image's type: a record of cells, or a union of null and one. */
  private static final class Image {
    final boolean union;
    final int nullBranch; // the union's null branch
    final Cell[] cells;
    final int depth; // its columns'

    Image(boolean union, int nullBranch, Cell[] cells) {
      this.union = union;
      this.nullBranch = nullBranch;
      this.cells = cells;
      this.depth = union ? 3 : 2;
    }
  }

  /** A column: its Connect reading, its Avro type, its name as written. */
  private static final class Cell {
    final Connect.Column column;
    final AvroJson.Node node;
    final byte[] quotedName;
    final boolean viaJson; // it may hold a map: written as JSON, then read as JSON is

    Cell(Connect.Column column, AvroJson.Node node, byte[] quotedName) {
      this.column = column;
      this.node = node;
      this.quotedName = quotedName;
      this.viaJson = column.kind == Connect.Kind.KEEP && hasMap(node, new HashSet<>());
    }
  }

  /** A task's buffers (a plan is shared by the executor's tasks). */
  static final class Scratch {
    final Encoding.Buffer after = new Encoding.Buffer();
    final Encoding.Buffer before = new Encoding.Buffer();
    final Encoding.Buffer meta = new Encoding.Buffer(); // source, then transaction, as JSON
    final Encoding.Buffer other = new Encoding.Buffer(); // fields read and dropped
    final Encoding.Buffer json = new Encoding.Buffer(); // a column that may hold a map
    final int[] at = new int[1];
  }

  private AvroEvent(AvroJson.Node[] fields, int[] roles, Image[] images) {
    this.fields = fields;
    this.roles = roles;
    this.images = images;
  }

  /**
   * The plan of a value schema ({@code typed}: its {after, before} columns by the Connect-style
   * schema), or null: its events are read through JSON.
   */
  static AvroEvent of(AvroJson.Node value, Connect.Column[][] typed) {
    if (value.type != AvroJson.Type.RECORD || typed == null || !plainNames(value)) {
      return null;
    }
    int n = value.children.length;
    int[] roles = new int[n];
    Image[] images = new Image[n];
    for (int k = 0; k < n; k++) {
      roles[k] = role(value.names[k]);
      if (roles[k] == AFTER || roles[k] == BEFORE) {
        images[k] = image(value.children[k], typed[roles[k] == AFTER ? 0 : 1]);
        if (images[k] == null) {
          return null;
        }
      }
    }
    return new AvroEvent(value.children, roles, images);
  }

  /** Whether {@link #key} reads {@code key}'s data as JSON would (a record of fields, no map). */
  static boolean keyable(AvroJson.Node key) {
    return key.type == AvroJson.Type.RECORD
        && key.children.length > 0
        && plainNames(key)
        && !hasMap(key, new HashSet<>()); // JSON refuses a name twice, which a map may hold
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

  /** An image field's plan: a record (or null and a record) whose fields are {@code columns}. */
  private static Image image(AvroJson.Node type, Connect.Column[] columns) {
    boolean union = type.type == AvroJson.Type.UNION;
    int nullBranch = -1;
    AvroJson.Node record = type;
    if (union) {
      record = null;
      for (int b = 0; b < type.children.length; b++) {
        AvroJson.Node branch = type.children[b];
        if (branch.type == AvroJson.Type.NULL && nullBranch < 0) {
          nullBranch = b;
        } else if (branch.type == AvroJson.Type.RECORD && record == null) {
          record = branch;
        } else {
          return null;
        }
      }
      if (type.children.length != 2 || record == null || nullBranch < 0) {
        return null;
      }
    }
    if (record == null
        || record.type != AvroJson.Type.RECORD
        || columns == null
        || columns.length == 0
        || columns.length != record.children.length
        || !plainNames(record)) {
      return null;
    }
    Cell[] cells = new Cell[columns.length];
    for (int k = 0; k < columns.length; k++) {
      byte[] quoted = record.names[k];
      if (!Arrays.equals(quoted, 1, quoted.length - 1, columns[k].name, 0, columns[k].name.length)
          || !readable(columns[k].kind, record.children[k])) {
        return null;
      }
      cells[k] = new Cell(columns[k], record.children[k], quoted);
    }
    return new Image(union, nullBranch, cells);
  }

  /** Whether a column's Avro type is one this reads its Connect kind from, as JSON would. */
  private static boolean readable(Connect.Kind kind, AvroJson.Node type) {
    if (type.type == AvroJson.Type.UNION) {
      for (AvroJson.Node branch : type.children) {
        if (branch.type == AvroJson.Type.UNION || !readable(kind, branch)) {
          return false;
        }
      }
      return true;
    }
    if (type.type == AvroJson.Type.NULL) {
      return true;
    }
    switch (kind) {
      case KEEP:
        return true;
      case DECIMAL:
        return type.type == AvroJson.Type.BYTES || type.type == AvroJson.Type.FIXED;
      case VARIABLE_DECIMAL:
        return type.type == AvroJson.Type.RECORD
            && type.children.length == 2
            && name(type, 0).equals("scale")
            && integral(type.children[0])
            && name(type, 1).equals("value")
            && (type.children[1].type == AvroJson.Type.BYTES
                || type.children[1].type == AvroJson.Type.FIXED);
      case DATE:
      case TIMESTAMP:
      case TIME:
        return integral(type);
      default:
        return true; // UNREADABLE: a value is not taken, a null is
    }
  }

  private static boolean integral(AvroJson.Node type) {
    return type.type == AvroJson.Type.INT || type.type == AvroJson.Type.LONG;
  }

  private static String name(AvroJson.Node record, int k) {
    byte[] quoted = record.names[k];
    return new String(quoted, 1, quoted.length - 2, java.nio.charset.StandardCharsets.UTF_8);
  }

  /** Whether a record's field names are written without escapes, and each once. */
  private static boolean plainNames(AvroJson.Node record) {
    Set<String> seen = new HashSet<>();
    for (byte[] quoted : record.names) {
      for (int i = 1; i < quoted.length - 1; i++) {
        if (quoted[i] == '\\') {
          return false;
        }
      }
      if (!seen.add(new String(quoted, java.nio.charset.StandardCharsets.UTF_8))) {
        return false;
      }
    }
    return true;
  }

  /** Whether a map can be met within {@code type} (or a record with a field name twice). */
  private static boolean hasMap(AvroJson.Node type, Set<AvroJson.Node> seen) {
    if (!seen.add(type)) {
      return false; // a named type again (recursion): looked at already
    }
    if (type.type == AvroJson.Type.MAP
        || (type.type == AvroJson.Type.RECORD && !plainNames(type))) {
      return true;
    }
    if (type.children != null) {
      for (AvroJson.Node child : type.children) {
        if (hasMap(child, seen)) {
          return true;
        }
      }
    }
    return false;
  }

  /**
   * The event at {@code b[5]} (after the wire format's magic byte and id): its envelope written
   * to {@code o} ({@code diff}: with before), its time and places to {@code out} by {@code
   * place}; false: not taken (the Python loop decides).
   */
  boolean read(
      byte[] b, Encoding.Buffer o, Scratch s, EventPlace place, boolean diff, Encoding.Encoded out) {
    int[] at = s.at;
    at[0] = 5;
    s.after.reset();
    s.before.reset();
    s.meta.reset();
    boolean afterNull = true;
    boolean sawAfter = false;
    boolean sawBefore = false;
    int op = 0;
    int source = -1;
    int transaction = -1;
    for (int k = 0; k < fields.length; k++) {
      switch (roles[k]) {
        case AFTER:
          sawAfter = true;
          if (!image(images[k], b, at, s.after, s)) {
            return false;
          }
          afterNull = s.after.bytes[0] == 'n';
          break;
        case BEFORE:
          sawBefore = true;
          if (!image(images[k], b, at, s.before, s)) {
            return false;
          }
          break;
        case OP:
          s.other.reset();
          if (!AvroJson.read(fields[k], b, at, s.other, FIELD)) {
            return false;
          }
          op = op(s.other);
          break;
        case SOURCE:
          source = s.meta.size;
          if (!AvroJson.read(fields[k], b, at, s.meta, FIELD)) {
            return false;
          }
          break;
        case TRANSACTION:
          transaction = s.meta.size;
          if (!AvroJson.read(fields[k], b, at, s.meta, FIELD)) {
            return false;
          }
          break;
        default:
          s.other.reset();
          if (!AvroJson.read(fields[k], b, at, s.other, FIELD)) {
            return false;
          }
      }
    }
    if (at[0] != b.length || (op != 'c' && op != 'r' && op != 'u' && op != 'd')) {
      return false;
    }
    byte[] meta = Arrays.copyOf(s.meta.bytes, s.meta.size);
    if (!place.read(meta, source, transaction, op == 'r', out) || afterNull != (op == 'd')) {
      return false;
    }
    Envelope.after(o);
    put(o, sawAfter ? s.after : null);
    if (diff) {
      Envelope.before(o);
      put(o, sawBefore ? s.before : null);
    }
    if (out.ts != null) {
      Envelope.updated(o, out.ts);
    }
    return true;
  }

  private static void put(Encoding.Buffer o, Encoding.Buffer image) {
    if (image == null) {
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

  /** An image's datum written as the envelope writes it: null, or its columns by kind. */
  private static boolean image(
      Image image, byte[] b, int[] at, Encoding.Buffer o, Scratch s) {
    if (image.union) {
      long branch = AvroJson.varint(b, at);
      if (at[0] < 0 || branch < 0 || branch > 1) {
        return false;
      }
      if (branch == image.nullBranch) {
        o.put(Json.NULL, 0, Json.NULL.length);
        return true;
      }
    }
    o.put('{');
    Cell[] cells = image.cells;
    for (int k = 0; k < cells.length; k++) {
      if (k > 0) {
        o.put(',');
      }
      o.put(cells[k].quotedName, 0, cells[k].quotedName.length);
      o.put(':');
      if (!cell(cells[k], image.depth, b, at, o, s)) {
        return false;
      }
    }
    o.put('}');
    return true;
  }

  private static boolean cell(
      Cell cell, int depth, byte[] b, int[] at, Encoding.Buffer o, Scratch s) {
    AvroJson.Node type = cell.node;
    if (type.type == AvroJson.Type.UNION) {
      long branch = AvroJson.varint(b, at);
      if (at[0] < 0 || branch < 0 || branch >= type.children.length) {
        return false;
      }
      type = type.children[(int) branch];
      depth++;
    }
    if (type.type == AvroJson.Type.NULL) {
      o.put(Json.NULL, 0, Json.NULL.length);
      return true;
    }
    Connect.Column column = cell.column;
    switch (column.kind) {
      case KEEP:
        if (cell.viaJson) {
          s.json.reset();
          if (!AvroJson.read(type, b, at, s.json, depth)) {
            return false;
          }
          byte[] text = Arrays.copyOf(s.json.bytes, s.json.size);
          return Canonical.value(text, 0, o, 2) == text.length;
        }
        return AvroJson.read(type, b, at, o, depth);
      case DECIMAL:
        {
          BigInteger unscaled = unscaled(type, b, at);
          if (unscaled == null) {
            return false;
          }
          Connect.decimal(unscaled, column.per, o);
          return true;
        }
      case VARIABLE_DECIMAL:
        {
          long scale = integer(type.children[0], b, at);
          BigInteger unscaled = at[0] < 0 ? null : unscaled(type.children[1], b, at);
          if (unscaled == null || scale == Long.MIN_VALUE || Math.abs(scale) > 1000) {
            return false;
          }
          Connect.decimal(unscaled, scale, o);
          return true;
        }
      case DATE:
        return Connect.date(integer(type, b, at), o) && at[0] >= 0;
      case TIMESTAMP:
      case TIME:
        return Connect.moment(integer(type, b, at), column, o) && at[0] >= 0;
      default:
        return false;
    }
  }

  /** An int or long (MIN_VALUE, as JSON's reading of it, for Long.MIN_VALUE or none). */
  private static long integer(AvroJson.Node type, byte[] b, int[] at) {
    long v = AvroJson.varint(b, at);
    if (at[0] < 0 || (type.type == AvroJson.Type.INT && v != (int) v)) {
      return Long.MIN_VALUE;
    }
    return v;
  }

  /** Bytes or fixed as a two's complement number; null for none or no bytes (JSON's reading). */
  private static BigInteger unscaled(AvroJson.Node type, byte[] b, int[] at) {
    int length;
    if (type.type == AvroJson.Type.FIXED) {
      length = type.size;
    } else {
      long n = AvroJson.varint(b, at);
      length = at[0] < 0 || n < 0 || n > Integer.MAX_VALUE ? -1 : (int) n;
    }
    if (length <= 0 || at[0] < 0 || at[0] + length > b.length) {
      return null;
    }
    BigInteger value = new BigInteger(b, at[0], length);
    at[0] += length;
    return value;
  }
}
