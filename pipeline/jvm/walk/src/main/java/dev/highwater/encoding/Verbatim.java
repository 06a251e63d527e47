package dev.highwater.encoding;

import java.nio.charset.StandardCharsets;

/**
 * A route whose output is the source's own bytes: the JSON encoder's wrapped envelope of the
 * source value's members (after, [before,] updated), keys written compact. It takes a change
 * only when the Python loop would pass it on unchanged: a compact key, a value of exactly
 * those members in that order, the time written as the changefeed writes times, all of it
 * valid JSON.
 */
final class Verbatim implements Encoding {
  private static final long serialVersionUID = 1L;
  private static final byte[] NULL = "null".getBytes(StandardCharsets.US_ASCII);

  private final byte[][] members;

  Verbatim(byte[][] members) {
    this.members = members;
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    long[] ts = envelope(value, members);
    if (ts == null || !Json.compactKey(key)) {
      return false;
    }
    out.ts = ts;
    out.key = key;
    out.value = value;
    return true;
  }

  /**
   * A change's time, when its value is an object of exactly {@code members} in that order,
   * after and before objects or null, updated a time as the changefeed writes times, all of
   * it valid JSON; else null.
   */
  static long[] envelope(byte[] b, byte[][] members) {
    int i = Json.ws(b, 0);
    if (i >= b.length || b[i] != '{') {
      return null;
    }
    long[] ts = null;
    for (int m = 0; m < members.length; m++) {
      i = Json.ws(b, i + 1);
      int name = i;
      i = name < b.length && b[name] == '"' ? Json.string(b, name, false) : -1;
      if (i < 0 || !Json.named(b, name, i, members[m])) {
        return null;
      }
      i = Json.ws(b, i);
      if (i >= b.length || b[i] != ':') {
        return null;
      }
      int start = Json.ws(b, i + 1);
      if (start >= b.length) {
        return null;
      }
      if (members[m][0] == 'u') { // updated
        i = b[start] == '"' ? Json.string(b, start, false) : -1;
        ts = i < 0 ? null : Hlc.parse(b, start + 1, i - 1);
        if (ts == null) {
          return null;
        }
      } else if (b[start] == '{') { // after, before
        i = Json.object(b, start, 1);
      } else {
        i = Json.literal(b, start, NULL);
      }
      if (i < 0) {
        return null;
      }
      i = Json.ws(b, i);
      if (i >= b.length || b[i] != (m + 1 < members.length ? ',' : '}')) {
        return null;
      }
    }
    return Json.ws(b, i + 1) == b.length ? ts : null;
  }
}
