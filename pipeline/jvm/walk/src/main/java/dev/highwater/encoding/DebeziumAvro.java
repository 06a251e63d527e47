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
  private final boolean diff;
  private final Map<String, long[]> commits;
  private transient Buffer text;
  private transient AvroEvent.Scratch scratch;
  private transient EventPlace place;

  DebeziumAvro(boolean diff, Map<String, long[]> commits, Registry registry) {
    this.json = new Debezium(diff, commits);
    this.registry = registry;
    this.diff = diff;
    this.commits = commits;
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
    if (avroKey && keySchema.keyable && avroValue && valueSchema.event != null) {
      return direct(key, keySchema, value, valueSchema, out);
    }
    byte[] k = avroKey ? payload(key, keySchema) : key;
    if (!avroValue) { // an Avro key, a JSON value: JSON as JsonConverter's
      return k != null && json.encode(k, value, out);
    }
    byte[] v = payload(value, valueSchema);
    return k != null && v != null && json.encode(k, v, valueSchema.typed, out);
  }

  /** Key and value read straight into the envelope ({@link AvroEvent}), as through JSON. */
  private boolean direct(
      byte[] key, Registry.Schema keySchema, byte[] value, Registry.Schema valueSchema,
      Encoded out) {
    if (scratch == null) {
      scratch = new AvroEvent.Scratch();
      place = new EventPlace(commits);
    }
    Buffer o = out.buffer;
    o.reset();
    if (!AvroEvent.key(keySchema.node, key, o, scratch.at)) {
      return false;
    }
    out.key = o.copy(0);
    o.reset();
    out.position = null;
    out.tx = null;
    out.ts = null;
    if (!valueSchema.event.read(value, o, scratch, place, diff, out)) {
      return false;
    }
    out.value = out.ts == null ? null : o.copy(0);
    return true;
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
