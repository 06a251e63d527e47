package dev.highwater.placement;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.Partition;
import org.apache.spark.rdd.PartitionCoalescer;
import org.apache.spark.rdd.PartitionGroup;
import org.apache.spark.rdd.RDD;
import org.apache.spark.scheduler.TaskLocation;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.Dataset;
import scala.Option;

/**
 * A batch's source ranges grouped into at most one task per core, each source partition on the
 * executor Spark's Kafka source prefers for it, batch after batch.
 *
 * <p>Spark's Kafka source names one executor per topic partition (a hash of the partition over
 * the sorted executors), so its cached consumer is reused. Spark's own coalesce
 * ({@code DefaultPartitionCoalescer}) weighs balance over that preference, at random, and a
 * partition's range lands on one executor in one batch and on the other in the next. Under
 * exactly once that moves the partition's transactional producer: the new executor's {@code
 * initTransactions} fences the old one's, which pays the same to take it back (Pieces.java).
 * Here every range goes to a task of its preferred executor (as many tasks per executor as its
 * share of the cores), so a partition's producer stays where it is while the executors do.
 * Without preferences (local mode) the ranges are cut into contiguous groups, as Spark does.
 * Each group walks its ranges in partition order, one after the other.
 */
public final class Placement implements PartitionCoalescer, Serializable {
  // the static methods are not named coalesce: py4j looks a name up among all methods
  private static final long serialVersionUID = 1L;

  /** {@code batch}'s rows in at most {@code tasks} partitions, grouped by preferred executor. */
  public static Dataset<Row> inPlace(Dataset<Row> batch, int tasks) {
    RDD<InternalRow> grouped = rowsInPlace(batch.queryExecution().toRdd(), tasks);
    return batch.sparkSession().internalCreateDataFrame(grouped, batch.schema(), false);
  }

  /** {@code rows} in at most {@code tasks} partitions, grouped by preferred executor. */
  public static RDD<InternalRow> rowsInPlace(RDD<InternalRow> rows, int tasks) {
    return rows.coalesce(Math.max(1, tasks), false, Option.apply(new Placement()), null);
  }

  @Override
  public PartitionGroup[] coalesce(int maxPartitions, RDD<?> parent) {
    Partition[] partitions = parent.partitions();
    List<String> places = new ArrayList<>();
    for (int k = 0; k < partitions.length; k++) {
      // as the scheduler finds it: through the narrow dependencies down to the source's scan
      Option<TaskLocation> place = parent.context().getPreferredLocs(parent, k).headOption();
      places.add(place.isDefined() ? place.get().toString() : null);
    }
    List<PartitionGroup> groups = new ArrayList<>();
    for (Group planned : plan(places, maxPartitions)) {
      PartitionGroup group = new PartitionGroup(Option.apply(planned.place()));
      planned.members().forEach(k -> group.partitions().addOne(partitions[k]));
      groups.add(group);
    }
    return groups.toArray(new PartitionGroup[0]);
  }

  /** A task: the place it prefers (null: none) and its partitions' indexes, in order. */
  record Group(String place, List<Integer> members) {}

  /**
   * The groups of partitions {@code 0..places.size()-1}, partition {@code k} preferring {@code
   * places.get(k)} (null: none): each place's partitions in {@code max / places} contiguous
   * groups (at least one), placed there; without any preference, {@code max} contiguous
   * groups; a partition without one among others that have one joins the smallest group.
   */
  static List<Group> plan(List<String> places, int max) {
    Map<String, List<Integer>> byPlace = new LinkedHashMap<>();
    List<Integer> nowhere = new ArrayList<>();
    for (int k = 0; k < places.size(); k++) {
      String place = places.get(k);
      if (place == null) {
        nowhere.add(k);
      } else {
        byPlace.computeIfAbsent(place, p -> new ArrayList<>()).add(k);
      }
    }
    List<Group> groups = new ArrayList<>();
    if (byPlace.isEmpty()) {
      return contiguous(nowhere, max, null);
    }
    int perPlace = Math.max(1, max / byPlace.size());
    byPlace.forEach((place, members) -> groups.addAll(contiguous(members, perPlace, place)));
    for (int k : nowhere) {
      Group smallest = groups.get(0);
      for (Group g : groups) {
        if (g.members().size() < smallest.members().size()) {
          smallest = g;
        }
      }
      smallest.members().add(k);
      smallest.members().sort(null); // each group walks its partitions in order
    }
    return groups;
  }

  /** {@code members} in order, cut into at most {@code count} non-empty contiguous groups. */
  private static List<Group> contiguous(List<Integer> members, int count, String place) {
    List<Group> groups = new ArrayList<>();
    int n = members.size();
    int cuts = Math.max(1, Math.min(count, n));
    for (int g = 0; g < cuts && n > 0; g++) {
      groups.add(new Group(place, new ArrayList<>(members.subList(g * n / cuts, (g + 1) * n / cuts))));
    }
    return groups;
  }
}
