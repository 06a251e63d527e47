package dev.highwater.encoding;

/**
 * Debezium's and Canal-JSON's changes written in Avro: the source's reader ({@link Debezium},
 * {@link DebeziumAvro}, {@link Canal}) writes each change as the JSON encoder's wrapped
 * envelope ({@code after}, [{@code before},] {@code updated}) and its key as the array of its
 * values, which is the form of a native source's record; {@link Avro} then writes that as it
 * writes a native record.
 *
 * <p>So the Python loop's bytes hold by the two halves' own: the reader's envelope is what the
 * JSON encoder writes of the change (the verbatim parity), and the Avro encoder writes of a
 * change what it writes of that change's JSON read back (strings, numbers by their text,
 * booleans and nulls are what they were). A change either half does not take is not taken; a
 * Canal-JSON event is taken whole or not at all, as by its reader.
 */
final class AvroOut implements Encoding {
  private static final long serialVersionUID = 1L;

  private final Encoding reader;
  private final Avro avro;
  private final boolean rows; // Canal-JSON: a record's changes are its rows

  AvroOut(Encoding reader, Avro avro, boolean rows) {
    this.reader = reader;
    this.avro = avro;
    this.rows = rows;
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    if (!reader.encode(key, value, out)) {
      return false;
    }
    if (!rows) {
      // a binlog change whose END was not read yet has no time and no value: the walk waits
      return out.ts == null || avro.encode(out.key, out.value, out);
    }
    if (out.marker != null) {
      return true;
    }
    long[] ts = out.ts;
    out.rowHeaders.clear();
    for (int k = 0; k < out.rowKeys.size(); k++) {
      if (!avro.encode(out.rowKeys.get(k), out.rowValues.get(k), out)) {
        return false;
      }
      out.rowKeys.set(k, out.key);
      out.rowValues.set(k, out.value); // null under key_only: a tombstone
      out.rowHeaders.add(out.headers); // a column's headers (headers_json_column_name), or null
    }
    out.ts = ts;
    out.headers = null;
    return true;
  }
}
