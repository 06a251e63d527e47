package dev.highwater.encoding;

import java.util.Map;

/**
 * Debezium's change events in Confluent's wire format ({@code AvroConverter}: byte 0, the
 * writer schema's registry id, Avro), read as pipeline/core/sources/wire.py reads them: each
 * key and value's payload written as the JSON {@code JsonConverter} would have written ({@link
 * AvroJson}), then read as {@link Debezium} reads JSON, the images by the columns of the
 * writer schema's Connect-style form ({@link Registry}). A key or value that is not in the
 * wire format is JSON, as on the Python side; one whose schema the registry does not give is
 * not taken (the Python loop names the record, or the registry).
 */
final class DebeziumAvro implements Encoding {
  private static final long serialVersionUID = 1L;

  private final Debezium json;
  private final Registry registry;
  private transient Buffer text;

  DebeziumAvro(boolean diff, Map<String, long[]> commits, Registry registry) {
    this.json = new Debezium(diff, commits);
    this.registry = registry;
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    if (text == null) {
      text = new Buffer();
    }
    boolean avroKey = key.length > 0 && key[0] == 0;
    boolean avroValue = value.length > 0 && value[0] == 0;
    if (!avroKey && !avroValue) {
      return json.encode(key, value, out);
    }
    Registry.Schema keySchema = avroKey ? schema(key) : null;
    Registry.Schema valueSchema = avroValue ? schema(value) : null;
    if ((avroKey && (keySchema == null || keySchema.enveloped))
        || (avroValue && (valueSchema == null || valueSchema.typed == null))) {
      return false; // a key of fields schema and payload: Python reads no envelope in Avro
    }
    byte[] k = avroKey ? payload(key, keySchema) : key;
    if (!avroValue) { // an Avro key, a JSON value: JSON as JsonConverter's
      return k != null && json.encode(k, value, out);
    }
    byte[] v = payload(value, valueSchema);
    return k != null && v != null && json.encode(k, v, valueSchema.typed, out);
  }

  private Registry.Schema schema(byte[] wire) {
    if (wire.length < 5) {
      return null;
    }
    long id = 0;
    for (int k = 1; k < 5; k++) {
      id = (id << 8) | (wire[k] & 0xff);
    }
    return registry.schema(id);
  }

  /** A wire-format record's payload as JSON (JsonConverter's), or null: not taken. */
  private byte[] payload(byte[] wire, Registry.Schema schema) {
    Buffer o = text;
    o.reset();
    int[] at = {5};
    if (!AvroJson.read(schema.node, wire, at, o, 0) || at[0] != wire.length) {
      return null; // bytes left over: fastavro would not read them, nor does the walk
    }
    return o.copy(0);
  }
}
