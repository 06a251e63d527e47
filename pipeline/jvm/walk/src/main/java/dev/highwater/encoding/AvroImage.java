package dev.highwater.encoding;

import java.math.BigInteger;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;

/**
 * A row image of a Debezium event's Avro ({@link AvroEvent}): a record of columns (or a union
 * of null and one), each read from its binary value by its Connect kind as reading the image
 * through JSON would ({@link Connect}): a decimal from its bytes, a date, time or timestamp from
 * its int or long, the rest as {@link AvroJson} writes it. A column that can hold a map is
 * written as JSON and read again ({@link Canonical}: JSON refuses a name twice, which an Avro
 * map may hold). The common columns (a string, int, long, boolean, bytes decimal or long
 * timestamp, alone or in {@code [null, T]}) are compiled once into an op and their name's
 * lead, read without walking their type ({@link #compiled}); the rest by {@link #cell}.
 */
final class AvroImage {
  final boolean union;
  final int nullBranch; // the union's null branch
  final Cell[] cells;
  final int depth; // its columns' (AvroJson's, reading the whole value: 2, or 3 in a union)

  private AvroImage(boolean union, int nullBranch, Cell[] cells) {
    this.union = union;
    this.nullBranch = nullBranch;
    this.cells = cells;
    this.depth = union ? 3 : 2;
  }

  /** A column: its Connect reading, its Avro type, its name as written (in its lead). */
  static final class Cell {
    final Connect.Column column;
    final AvroJson.Node node;
    final boolean viaJson; // it may hold a map: written as JSON, then read as JSON is
    // its reading compiled: one of the ops below for its type alone or in [null, T] (either
    // order), the union's branches as their one-byte varints; GENERAL: by cell()
    final int op;
    final int nullByte; // the null branch's varint, or -1: not [null, T]
    final int valueByte; // T's branch's varint
    final byte[] lead; // what is written before its value: its name (after a comma, but first)

    Cell(Connect.Column column, AvroJson.Node node, byte[] quotedName, boolean first) {
      this.column = column;
      this.node = node;
      this.viaJson = column.kind == Connect.Kind.KEEP && hasMap(node, new HashSet<>());
      int n = node.type == AvroJson.Type.UNION && node.children.length == 2
          ? (node.children[0].type == AvroJson.Type.NULL ? 0 : 1) // the null branch, if any
          : -1;
      boolean nullable = n >= 0 && node.children[n].type == AvroJson.Type.NULL;
      this.nullByte = nullable ? 2 * n : -1; // zig-zag: 0 -> 0, 1 -> 2
      this.valueByte = nullable ? 2 * (1 - n) : -1;
      AvroJson.Node value = nullable ? node.children[1 - n] : node;
      this.op = viaJson || value.type == AvroJson.Type.UNION ? GENERAL : op(column.kind, value.type);
      this.lead = new byte[quotedName.length + (first ? 1 : 2)];
      lead[0] = ',';
      System.arraycopy(quotedName, 0, lead, first ? 0 : 1, quotedName.length);
      lead[lead.length - 1] = ':';
    }
  }

  private static final int GENERAL = 0;
  private static final int STRING = 1;
  private static final int INT = 2;
  private static final int LONG = 3;
  private static final int BOOLEAN = 4;
  private static final int DECIMAL = 5; // bytes
  private static final int MOMENT = 6; // a TIMESTAMP or TIME of a long

  private static int op(Connect.Kind kind, AvroJson.Type type) {
    switch (kind) {
      case KEEP:
        switch (type) {
          case STRING:
            return STRING;
          case INT:
            return INT;
          case LONG:
            return LONG;
          case BOOLEAN:
            return BOOLEAN;
          default:
            return GENERAL;
        }
      case DECIMAL:
        return type == AvroJson.Type.BYTES ? DECIMAL : GENERAL;
      case TIMESTAMP:
      case TIME:
        return type == AvroJson.Type.LONG ? MOMENT : GENERAL;
      default:
        return GENERAL;
    }
  }

  /**
   * The plan of an image field of Avro type {@code type} whose columns are {@code columns} (the
   * Connect-style schema's): a record, or a union of null and one; null when it is another.
   */
  static AvroImage of(AvroJson.Node type, Connect.Column[] columns) {
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
      cells[k] = new Cell(columns[k], record.children[k], quoted, k == 0);
    }
    return new AvroImage(union, nullBranch, cells);
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
  static boolean plainNames(AvroJson.Node record) {
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
  static boolean hasMap(AvroJson.Node type, Set<AvroJson.Node> seen) {
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
   * The image's datum at {@code b[at[0]]} written as the envelope writes it (null, or its
   * columns by kind); {@code json}: scratch for a column that may hold a map. False: not taken.
   */
  boolean read(byte[] b, int[] at, Encoding.Buffer o, Encoding.Buffer json) {
    if (union) {
      long branch = AvroJson.varint(b, at);
      if (at[0] < 0 || branch < 0 || branch > 1) {
        return false;
      }
      if (branch == nullBranch) {
        o.put(Json.NULL, 0, Json.NULL.length);
        return true;
      }
    }
    o.put('{');
    for (Cell cell : cells) {
      o.put(cell.lead, 0, cell.lead.length);
      if (cell.op == GENERAL ? !cell(cell, depth, b, at, o, json) : !compiled(cell, b, at, o, json)) {
        return false;
      }
    }
    o.put('}');
    return true;
  }

  /** A column of a compiled op, written as {@link #cell} writes it. */
  private boolean compiled(Cell cell, byte[] b, int[] at, Encoding.Buffer o, Encoding.Buffer json) {
    int i = at[0];
    if (cell.nullByte >= 0) {
      if (i >= b.length) {
        return false;
      }
      int branch = b[i++];
      if (branch == cell.nullByte) {
        at[0] = i;
        o.put(Json.NULL, 0, Json.NULL.length);
        return true;
      }
      if (branch != cell.valueByte) { // no such branch, or its number in more bytes
        return cell(cell, depth, b, at, o, json);
      }
      at[0] = i;
    }
    switch (cell.op) {
      case STRING:
        return AvroJson.string(b, at, o);
      case INT:
      case LONG:
        return AvroJson.integer(b, at, cell.op == INT, o);
      case BOOLEAN:
        return AvroJson.bool(b, at, o);
      case DECIMAL:
        {
          long length = AvroJson.varint(b, at);
          if (at[0] < 0 || length <= 0 || length > b.length - at[0]) {
            return false; // none, or no bytes: JSON's reading
          }
          Connect.decimal(b, at[0], (int) length, cell.column.per, o);
          at[0] += (int) length;
          return true;
        }
      default: // MOMENT
        {
          long v = AvroJson.varint(b, at);
          return at[0] >= 0 && v != Long.MIN_VALUE && Connect.moment(v, cell.column, o);
        }
    }
  }

  /**
   * A column's type at {@code b[at[0]]}: of a union, the branch read there; else its own. Null:
   * not taken (no branch of that number).
   */
  static AvroJson.Node branch(Cell cell, byte[] b, int[] at) {
    AvroJson.Node type = cell.node;
    if (type.type != AvroJson.Type.UNION) {
      return type;
    }
    long branch = AvroJson.varint(b, at);
    if (at[0] < 0 || branch < 0 || branch >= type.children.length) {
      return null;
    }
    return type.children[(int) branch];
  }

  /** A column's datum (its union's branch first, if one) written as {@link #read} writes it. */
  static boolean cell(
      Cell cell, int depth, byte[] b, int[] at, Encoding.Buffer o, Encoding.Buffer json) {
    AvroJson.Node type = branch(cell, b, at);
    if (type == null) {
      return false;
    }
    if (type != cell.node) {
      depth++; // a union's branch
    }
    if (type.type == AvroJson.Type.NULL) {
      o.put(Json.NULL, 0, Json.NULL.length);
      return true;
    }
    Connect.Column column = cell.column;
    switch (column.kind) {
      case KEEP:
        if (cell.viaJson) {
          json.reset();
          if (!AvroJson.read(type, b, at, json, depth)) {
            return false;
          }
          byte[] text = Arrays.copyOf(json.bytes, json.size);
          return Canonical.value(text, 0, o, 2) == text.length;
        }
        return AvroJson.read(type, b, at, o, depth);
      case DECIMAL:
        {
          int length = length(type, b, at);
          if (length <= 0 || at[0] + length > b.length) {
            return false; // none, or no bytes: JSON's reading
          }
          Connect.decimal(b, at[0], length, column.per, o);
          at[0] += length;
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

  /** The length of bytes (read from {@code b}) or fixed; -1 for none. */
  private static int length(AvroJson.Node type, byte[] b, int[] at) {
    if (type.type == AvroJson.Type.FIXED) {
      return at[0] < 0 ? -1 : type.size;
    }
    long n = AvroJson.varint(b, at);
    return at[0] < 0 || n < 0 || n > Integer.MAX_VALUE ? -1 : (int) n;
  }

  /** Bytes or fixed as a two's complement number; null for none or no bytes (JSON's reading). */
  private static BigInteger unscaled(AvroJson.Node type, byte[] b, int[] at) {
    int length = length(type, b, at);
    if (length <= 0 || at[0] < 0 || at[0] + length > b.length) {
      return null;
    }
    BigInteger value = new BigInteger(b, at[0], length);
    at[0] += length;
    return value;
  }
}
