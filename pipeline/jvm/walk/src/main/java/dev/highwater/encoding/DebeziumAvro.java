package dev.highwater.encoding;

import java.util.IdentityHashMap;
import java.util.Map;

/**
 * Debezium's change events in Confluent's wire format ({@code AvroConverter}: byte 0, the
 * writer schema's registry id, Avro), read as pipeline/core/sources/wire.py reads them: each
 * key and value's payload written as the JSON {@code JsonConverter} would have written ({@link
 * AvroJson}), then read as {@link Debezium} reads JSON, the images by the columns of the
 * writer schema's Connect-style form ({@link Registry}). A key or value that is not in the
 * wire format is JSON, as on the Python side; one whose schema the registry does not give is
 * not taken (the Python loop names the record, or the registry).
 *
 * <p>Given a route's {@link Avro}, it writes that route's records itself: an event read
 * straight ({@link AvroEvent}) has its images written in the route's row record ({@link
 * AvroRow}), with no JSON envelope between; any other is read into the envelope as above and
 * written again by the route ({@link AvroOut}'s way).
 */
final class DebeziumAvro implements Encoding {
  private static final long serialVersionUID = 1L;

  private final Debezium json;
  private final Registry registry;
  private final boolean diff;
  private final Map<String, long[]> commits;
  private final Avro avro; // the route's Avro, or null: the envelope is the output (JSON)
  private transient Buffer text;
  private transient AvroEvent.Scratch scratch;
  private transient EventPlace place;
  private transient Map<AvroEvent, AvroRow[]> rows; // per event plan, its rows' (NONE: none)

  private static final AvroRow[] NONE = new AvroRow[0];

  DebeziumAvro(boolean diff, Map<String, long[]> commits, Registry registry) {
    this(diff, commits, registry, null);
  }

  DebeziumAvro(boolean diff, Map<String, long[]> commits, Registry registry, Avro avro) {
    this.json = new Debezium(diff, commits);
    this.registry = registry;
    this.diff = diff;
    this.commits = commits;
    this.avro = avro;
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    if (text == null) {
      text = new Buffer();
    }
    boolean avroKey = key.length > 0 && key[0] == 0;
    boolean avroValue = value.length > 0 && value[0] == 0;
    if (!avroKey && !avroValue) {
      return written(json.encode(key, value, out), out);
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
      return k != null && written(json.encode(k, value, out), out);
    }
    byte[] v = payload(value, valueSchema);
    return k != null && v != null && written(json.encode(k, v, valueSchema.typed, out), out);
  }

  /** A change read into the envelope, written again by the route's Avro (if any). */
  private boolean written(boolean read, Encoded out) {
    // a binlog change whose END was not read yet has no time and no value: the walk waits
    return read && (avro == null || out.ts == null || avro.encode(out.key, out.value, out));
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
    AvroRow[] plan = avro == null ? null : rows(valueSchema.event);
    if (plan != null) { // its images straight into the route's rows
      if (!valueSchema.event.read(value, scratch, place, plan, out)) {
        return false;
      }
      out.value = null;
      return out.ts == null || avro.rows(out.key, scratch.after, scratch.before, out.ts, out);
    }
    if (!valueSchema.event.read(value, o, scratch, place, diff, out)) {
      return false;
    }
    out.value = out.ts == null ? null : o.copy(0);
    return written(true, out);
  }

  /** The plan of an event's images into the route's rows, or null: through the envelope. */
  private AvroRow[] rows(AvroEvent event) {
    if (rows == null) {
      rows = new IdentityHashMap<>();
    }
    AvroRow[] plan = rows.computeIfAbsent(event, e -> {
      AvroRow[] r = e.rows(avro.columns(), diff);
      return r == null ? NONE : r;
    });
    return plan == NONE ? null : plan;
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
