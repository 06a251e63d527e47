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
  // the last key's and value's schemas (a topic's records mostly share two): the registry's
  // cache is keyed by its URL and the id, a string built for each look-up
  private transient Last keys;
  private transient Last values;

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
    if (keys == null) {
      keys = new Last();
      values = new Last();
    }
    Registry.Schema keySchema = avroKey ? keys.schema(key, registry) : null;
    Registry.Schema valueSchema = avroValue ? values.schema(value, registry) : null;
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
    AvroRow[] plan = avro == null ? null : values.rows(avro, diff);
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

  /**
   * The schema of the last id a record named, kept for the next (a task's), and the plan of its
   * events' images into a route's rows.
   */
  private static final class Last {
    private long id = -1;
    private Registry.Schema schema;
    private AvroRow[] rows; // NONE: its events go through the envelope; null: not planned yet

    Registry.Schema schema(byte[] wire, Registry registry) {
      long named = id(wire);
      if (named != id || schema == null) {
        schema = named < 0 ? null : registry.schema(named);
        id = named;
        rows = null;
      }
      return schema;
    }

    /**
     * The plan of the schema's events (it has an {@link AvroEvent}) into {@code avro}'s rows;
     * under {@code key_column} before too (a delete is keyed by it), and only when the images
     * hold that column (else the envelope's way, where a change lacking it is not taken).
     */
    AvroRow[] rows(Avro avro, boolean diff) {
      if (rows == null) {
        int column = avro.keyColumn();
        AvroRow[] planned = schema.event.rows(avro.columns(), diff || column >= 0);
        for (int k = 0; planned != null && column >= 0 && k < planned.length; k++) {
          if (planned[k] != null && !planned[k].has(column)) {
            planned = null;
          }
        }
        rows = planned == null ? NONE : planned;
      }
      return rows == NONE ? null : rows;
    }
  }

  /** The writer schema's id a wire-format record names, or -1 (too short to name one). */
  private static long id(byte[] wire) {
    if (wire.length < 5) {
      return -1;
    }
    long id = 0;
    for (int k = 1; k < 5; k++) {
      id = (id << 8) | (wire[k] & 0xff);
    }
    return id;
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
