package dev.highwater.encoding;

import java.nio.charset.StandardCharsets;

/**
 * The JSON encoder's wrapped envelope as the walk writes it for the changes it reads itself
 * (Debezium's, Canal-JSON's): {@code {"after":…[,"before":…],"updated":"<time>"}}.
 */
final class Envelope {
  private static final byte[] AFTER = Members.utf8("{\"after\":");
  private static final byte[] BEFORE = Members.utf8(",\"before\":");
  private static final byte[] UPDATED = Members.utf8(",\"updated\":\"");

  private Envelope() {}

  /** The opening, up to after's value. */
  static void after(Encoding.Buffer o) {
    o.put(AFTER, 0, AFTER.length);
  }

  /** Between after's value and before's. */
  static void before(Encoding.Buffer o) {
    o.put(BEFORE, 0, BEFORE.length);
  }

  /** The time, and the end. */
  static void updated(Encoding.Buffer o, long[] ts) {
    if (ts[0] < 0 || ts[1] < 0) {
      updated(o, text(ts));
      return;
    }
    o.put(UPDATED, 0, UPDATED.length); // the time's digits straight, as Hlc.text spells them
    Digits.put(o, ts[0]);
    o.put('.');
    Digits.put(o, ts[1], Math.max(10, Digits.count(ts[1])));
    o.put('"');
    o.put('}');
  }

  /** The time as its {@link #text}, and the end. */
  static void updated(Encoding.Buffer o, byte[] time) {
    o.put(UPDATED, 0, UPDATED.length);
    o.put(time, 0, time.length);
    o.put('"');
    o.put('}');
  }

  /** A time's text as the changefeed writes it (for the rows of one event, once). */
  static byte[] text(long[] ts) {
    return Hlc.text(ts).getBytes(StandardCharsets.US_ASCII);
  }
}
