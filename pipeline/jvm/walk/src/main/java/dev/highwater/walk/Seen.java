package dev.highwater.walk;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.highwater.encoding.Hlc;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One source partition's walk in a task: its floor, counts and, for Debezium, the highest
 * source position read and each transaction's places; its summary is the Python loop's
 * ({@code PartitionSeen.to_json}).
 */
final class Seen {
  /** A transaction's changes read: their places, the lowest and highest time. */
  static final class Tx {
    long[] places = new long[4];
    int count;
    long[] low;
    long[] high;
  }

  final String topic;
  final int partition;
  final Walk.Route route;
  long[] floor;
  long[] resolved; // the highest marker read
  final long first; // the first offset read
  long end; // just past the last offset read
  long deferred = -1; // where the walk stopped, or -1
  long[] deferredFloor;
  long emitted;
  long duplicates;
  long bytes;
  long[] latest; // the highest source position read (Debezium), or the plan's
  long resent; // changes at or below it: sent again
  final Map<String, Tx> transactions = new LinkedHashMap<>();

  Seen(String topic, int partition, Walk.Route route, long[] floor, long[] latest, long first) {
    this.first = first;
    this.topic = topic;
    this.partition = partition;
    this.route = route;
    this.floor = floor;
    this.latest = latest;
  }

  /** A change of transaction {@code id} at place {@code within}, time {@code ts} (or null). */
  void saw(String id, long within, long[] ts) {
    Tx tx = transactions.computeIfAbsent(id, k -> new Tx());
    if (tx.count == tx.places.length) {
      tx.places = java.util.Arrays.copyOf(tx.places, 2 * tx.count);
    }
    tx.places[tx.count++] = within;
    if (ts == null) {
      return; // a re-send whose commit time is not known: a place, no time
    }
    if (tx.low == null || Walk.compare(ts, tx.low) < 0) {
      tx.low = ts;
    }
    if (tx.high == null || Walk.compare(ts, tx.high) > 0) {
      tx.high = ts;
    }
  }

  /** The position where the partition's progress stands (the rest, if any, starts there). */
  ArrayNode position() {
    if (latest == null || latest.length == 0) {
      return null; // none, or one beyond a long's (the rest's summary has it)
    }
    ArrayNode out = JsonNodeFactory.instance.arrayNode();
    for (long p : latest) {
      out.add(p);
    }
    return out;
  }

  String summary(ObjectMapper json) {
    ObjectNode s = json.createObjectNode();
    ObjectNode txs = s.putObject("transactions");
    for (Map.Entry<String, Tx> e : transactions.entrySet()) {
      Tx tx = e.getValue();
      ArrayNode places = json.createArrayNode();
      for (int k = 0; k < tx.count; k++) {
        places.add(tx.places[k]);
      }
      txs.putArray(e.getKey())
          .add(places)
          .add(tx.low == null ? null : Hlc.text(tx.low))
          .add(tx.high == null ? null : Hlc.text(tx.high));
    }
    s.put("topic", topic);
    s.put("partition", partition);
    s.put("next_offset", deferred >= 0 ? deferred : end);
    s.put("resolved", resolved == null ? null : Hlc.text(resolved));
    s.put("emitted", emitted);
    s.put("duplicates", duplicates);
    s.put("bad", 0);
    s.putNull("first_bad");
    s.put("bytes", bytes);
    s.set("position", position());
    s.put("resent", resent);
    if (deferred >= 0) { // [from, to, floor, transaction]: the rest the Python loop runs
      s.putArray("deferred").add(deferred).add(end).add(Hlc.text(deferredFloor)).addNull();
    } else {
      s.putNull("deferred");
    }
    s.putNull("schema_change");
    // the last snapshot read's offset: EventPlace leaves PostgreSQL's and binlogs' reads to the
    // Python loop, which says where its last one lies (summary.py's reread)
    s.putNull("reread");
    return s.toString();
  }
}
