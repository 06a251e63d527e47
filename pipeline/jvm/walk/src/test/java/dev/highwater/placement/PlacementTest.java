package dev.highwater.placement;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

class PlacementTest {
  private static String show(List<Placement.Group> groups) {
    List<String> shown = new ArrayList<>();
    groups.forEach(g -> shown.add(g.place() + "=" + g.members()));
    return String.join(" ", shown);
  }

  @Test
  void everyRangeStaysOnItsPreferredExecutorWhateverTheBalance() {
    // Spark's coalesce would move one of a's four ranges to b (balance first, at random)
    List<String> places = Arrays.asList("a", "b", "a", "a", "b", "a");
    assertEquals("a=[0, 2, 3, 5] b=[1, 4]", show(Placement.plan(places, 2)));
  }

  @Test
  void aPlaceWithSeveralCoresGetsAsManyContiguousTasks() {
    List<String> places = Arrays.asList("a", "b", "a", "a", "b", "a");
    assertEquals("a=[0, 2] a=[3, 5] b=[1] b=[4]", show(Placement.plan(places, 4)));
  }

  @Test
  void theSamePreferencesGiveTheSameGroupsBatchAfterBatch() {
    List<String> places = Arrays.asList("b", "a", "b", "a");
    assertEquals(show(Placement.plan(places, 2)), show(Placement.plan(places, 2)));
    assertEquals("b=[0, 2] a=[1, 3]", show(Placement.plan(places, 2)));
  }

  @Test
  void withoutPreferencesTheRangesAreCutInOrderAsSparkDoes() {
    List<String> none = Arrays.asList(null, null, null, null, null);
    assertEquals("null=[0, 1] null=[2, 3, 4]", show(Placement.plan(none, 2)));
    assertEquals("null=[0] null=[1]", show(Placement.plan(Arrays.asList(null, null), 8)));
    assertEquals("", show(Placement.plan(List.of(), 2)));
  }

  @Test
  void aRangeWithoutPreferenceAmongPlacedOnesJoinsTheSmallestGroupInOrder() {
    List<String> places = Arrays.asList("a", "a", null, "b");
    assertEquals("a=[0, 1] b=[2, 3]", show(Placement.plan(places, 2)));
  }
}
