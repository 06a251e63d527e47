package dev.highwater.encoding;

/**
 * A Debezium event's source or transaction field read from its Avro datum straight into the
 * {@link SourceValues} {@link EventPlace} places the event by: each member it reads as what it
 * is (a long, a text's bytes where they lie, a boolean, null), the others read past. Reading
 * them as JSON ({@link AvroJson}) and finding them again wrote and parsed every number and
 * text once more; this takes what that takes and gives the same values (AvroEventTest holds
 * the two ways to the same answer). A field of a shape it does not know ({@link #of}: null)
 * is read the JSON way.
 */
final class AvroSource {
  private final AvroJson.Node type; // the field's: a record, or a union of null and records
  private final int[][] slots; // per branch, per field: the member it is (-1: read past); null: null
  private final AvroJson.Node[][] members; // per branch, per field: its type as a member (or null)

  private AvroSource(AvroJson.Node type, int[][] slots, AvroJson.Node[][] members) {
    this.type = type;
    this.slots = slots;
    this.members = members;
  }

  /**
   * The plan of a field of {@code type} whose members {@code names} ({@link EventPlace#SOURCE}
   * or {@link EventPlace#TRANSACTION}) are read into the values from {@code first} on; null
   * where a member is not a long, int, string or boolean (or one of those or null).
   */
  static AvroSource of(AvroJson.Node type, byte[][] names, int first) {
    boolean union = type.type == AvroJson.Type.UNION;
    AvroJson.Node[] branches = union ? type.children : new AvroJson.Node[] {type};
    int[][] slots = new int[branches.length][];
    AvroJson.Node[][] members = new AvroJson.Node[branches.length][];
    for (int b = 0; b < branches.length; b++) {
      AvroJson.Node branch = branches[b];
      if (branch.type == AvroJson.Type.NULL) {
        continue;
      }
      if (branch.type != AvroJson.Type.RECORD || !AvroImage.plainNames(branch)) {
        return null;
      }
      slots[b] = new int[branch.names.length];
      members[b] = new AvroJson.Node[branch.names.length];
      for (int f = 0; f < branch.names.length; f++) {
        byte[] quoted = branch.names[f];
        slots[b][f] = -1;
        for (int k = 0; k < names.length; k++) {
          if (java.util.Arrays.equals(quoted, 1, quoted.length - 1, names[k], 0, names[k].length)) {
            if (!simple(branch.children[f])) {
              return null;
            }
            slots[b][f] = first + k;
            members[b][f] = branch.children[f];
          }
        }
      }
    }
    return new AvroSource(type, slots, members);
  }

  /** A long, int, string, boolean or null, or a union of those. */
  private static boolean simple(AvroJson.Node n) {
    if (n.type == AvroJson.Type.UNION) {
      for (AvroJson.Node branch : n.children) {
        if (branch.type == AvroJson.Type.UNION || !simple(branch)) {
          return false;
        }
      }
      return true;
    }
    switch (n.type) {
      case NULL:
      case BOOLEAN:
      case INT:
      case LONG:
      case STRING:
        return true;
      default:
        return false;
    }
  }

  /**
   * The field's datum at {@code at}: its members into {@code v}; -1 when not taken, 0 when it
   * is null, 1 when it is a record.
   */
  int read(byte[] b, int[] at, SourceValues v, int depth) {
    int branch = 0;
    if (type.type == AvroJson.Type.UNION) {
      long index = AvroJson.varint(b, at);
      if (at[0] < 0 || index < 0 || index >= type.children.length) {
        return -1;
      }
      branch = (int) index;
      depth++;
    }
    int[] fields = slots[branch];
    if (fields == null) {
      return 0;
    }
    AvroJson.Node record = type.type == AvroJson.Type.UNION ? type.children[branch] : type;
    for (int f = 0; f < fields.length; f++) {
      boolean read =
          fields[f] < 0
              ? AvroJson.skip(record.children[f], b, at, depth + 1)
              : member(members[branch][f], b, at, v, fields[f]);
      if (!read) {
        return -1;
      }
    }
    return 1;
  }

  /** One member's value into slot {@code k} of {@code v}; false: not a datum of its type. */
  private static boolean member(AvroJson.Node n, byte[] b, int[] at, SourceValues v, int k) {
    if (n.type == AvroJson.Type.UNION) {
      long index = AvroJson.varint(b, at);
      if (at[0] < 0 || index < 0 || index >= n.children.length) {
        return false;
      }
      n = n.children[(int) index];
    }
    switch (n.type) {
      case NULL:
        v.kind[k] = SourceValues.NULL;
        return true;
      case BOOLEAN:
        if (at[0] >= b.length || (b[at[0]] & 0xfe) != 0) {
          return false;
        }
        v.kind[k] = b[at[0]++] == 1 ? SourceValues.TRUE : SourceValues.FALSE;
        return true;
      case INT:
      case LONG:
        long value = AvroJson.varint(b, at);
        if (at[0] < 0 || (n.type == AvroJson.Type.INT && value != (int) value)) {
          return false;
        }
        v.integer(k, value);
        return true;
      default: // STRING
        int start = at[0];
        if (!AvroJson.string(b, at, null)) {
          return false;
        }
        int[] content = {start};
        AvroJson.varint(b, content); // past its length
        v.text(k, content[0], at[0], Json.escaped(b, content[0], at[0]));
        return true;
    }
  }

}
