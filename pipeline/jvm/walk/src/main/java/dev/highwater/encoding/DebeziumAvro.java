package dev.highwater.encoding;

import java.util.Map;

/**
 * Debezium's change events in Confluent's wire format ({@code AvroConverter}: byte 0, the
 * writer schema's registry id, Avro), read as pipeline/core/sources/wire.py reads them: each
 * key and value written as the {@code {"schema", "payload"}} JSON that {@code JsonConverter}
 * with schemas would have written ({@link AvroJson}, the schema's Connect-style form from
 * the {@link Registry}), then read as {@link Debezium} reads JSON. A key or value that is not in
 * the wire format is JSON, as on the Python side; one whose schema the registry does not give
 * is not taken (the Python loop names the record, or the registry).
 */
final class DebeziumAvro implements Encoding {
  private static final long serialVersionUID = 1L;
  private static final byte[] SCHEMA = "{\"schema\":".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
  private static final byte[] PAYLOAD = ",\"payload\":".getBytes(java.nio.charset.StandardCharsets.US_ASCII);

  private final Debezium json;
  private final Registry registry;
  private transient Buffer text;

  DebeziumAvro(byte[][] members, Map<String, long[]> commits, Registry registry) {
    this.json = new Debezium(members, commits);
    this.registry = registry;
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    if (text == null) {
      text = new Buffer();
    }
    byte[] k = key.length > 0 && key[0] == 0 ? json(key) : key;
    byte[] v = value.length > 0 && value[0] == 0 ? json(value) : value;
    return k != null && v != null && json.encode(k, v, out);
  }

  /** A wire-format record as {@code {"schema": <Connect-style>, "payload": <JSON>}}, or null. */
  private byte[] json(byte[] wire) {
    if (wire.length < 5) {
      return null;
    }
    long id = 0;
    for (int k = 1; k < 5; k++) {
      id = (id << 8) | (wire[k] & 0xff);
    }
    Registry.Schema schema = registry.schema(id);
    if (schema == null) {
      return null;
    }
    Buffer o = text;
    o.reset();
    o.put(SCHEMA, 0, SCHEMA.length);
    o.put(schema.connect, 0, schema.connect.length);
    o.put(PAYLOAD, 0, PAYLOAD.length);
    int[] at = {5};
    if (!AvroJson.read(schema.node, wire, at, o, 0) || at[0] != wire.length) {
      return null; // bytes left over: fastavro would not read them, nor does the walk
    }
    o.put('}');
    return o.copy(0);
  }
}
