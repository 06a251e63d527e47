package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.time.DateTimeException;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * The columns of a Debezium event's Connect schema and their values, read as
 * pipeline/core/sources/connect_types.py reads them ({@code field_schemas}, {@code _semantic}):
 * decimals (base64 two's complement) as numbers with their exact digits, dates, times and
 * timestamps as ISO-8601 text, the rest as it came ({@link Canonical}). What the Python side
 * would refuse, or reads in a way not copied here, is not taken (-1): the Python loop decides.
 */
final class Connect {
  enum Kind {
    KEEP,
    DECIMAL,
    VARIABLE_DECIMAL,
    DATE,
    TIMESTAMP,
    TIME,
    UNREADABLE // a semantic type whose schema the Python side cannot read: it names the record
  }

  private static final Map<String, Long> TIMESTAMPS =
      Map.of(
          "io.debezium.time.Timestamp", 1_000L,
          "io.debezium.time.MicroTimestamp", 1_000_000L,
          "io.debezium.time.NanoTimestamp", 1_000_000_000L,
          "org.apache.kafka.connect.data.Timestamp", 1_000L);
  private static final Map<String, Long> TIMES =
      Map.of(
          "io.debezium.time.Time", 1_000L,
          "io.debezium.time.MicroTime", 1_000_000L,
          "io.debezium.time.NanoTime", 1_000_000_000L,
          "org.apache.kafka.connect.data.Time", 1_000L);
  private static final Set<String> DATES =
      Set.of("io.debezium.time.Date", "org.apache.kafka.connect.data.Date");
  private static final int MAX_SCALE = 1000;
  private static final int SHORT_SCALE = 64; // decimal(long, ...) writes these itself
  private static final byte[] SCALE = "scale".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] VALUE = "value".getBytes(StandardCharsets.US_ASCII);

  /** One column of an image: its name, how its values are read. */
  static final class Column {
    final byte[] name;
    final Kind kind;
    final long per; // DECIMAL: the scale; TIMESTAMP, TIME: units per second
    final int places; // TIMESTAMP, TIME: a fraction's digits (per's zeros)

    Column(byte[] name, Kind kind, long per) {
      this.name = name;
      this.kind = kind;
      this.per = per;
      this.places = per > 0 ? Digits.count(per) - 1 : 0;
    }
  }

  private Connect() {}

  /**
   * The columns of the envelope's {@code field} (after, before) in a value's schema, in order:
   * empty when the schema has none (values are kept as they came), null when they cannot be
   * told apart by name (a name twice, or not text).
   */
  static Column[] columns(JsonNode schema, String field) {
    for (JsonNode entry : schema.path("fields")) {
      if (entry.isObject() && field.equals(entry.path("field").textValue())) {
        JsonNode columns = entry.path("fields");
        Column[] out = new Column[columns.size()];
        Set<String> names = new HashSet<>();
        for (int k = 0; k < out.length; k++) {
          JsonNode c = columns.get(k);
          String name = c.path("field").textValue();
          if (!c.isObject() || name == null || !names.add(name)) {
            return null;
          }
          out[k] = column(name, c);
        }
        return out;
      }
    }
    return new Column[0];
  }

  private static Column column(String field, JsonNode c) {
    byte[] name = field.getBytes(StandardCharsets.UTF_8);
    JsonNode semantic = c.path("name");
    if (semantic.isMissingNode() || semantic.isNull() || semantic.asText("x").isEmpty()) {
      return new Column(name, Kind.KEEP, 0); // no semantic type (Python: a falsy name)
    }
    if (!semantic.isTextual()) {
      return new Column(name, Kind.UNREADABLE, 0);
    }
    String kind = semantic.textValue();
    if (kind.equals("org.apache.kafka.connect.data.Decimal")) {
      String scale = c.path("parameters").path("scale").textValue();
      if (scale == null || !scale.matches("-?[0-9]{1,4}")) {
        return new Column(name, Kind.UNREADABLE, 0);
      }
      int s = Integer.parseInt(scale);
      return new Column(name, Math.abs(s) > MAX_SCALE ? Kind.UNREADABLE : Kind.DECIMAL, s);
    }
    if (kind.equals("io.debezium.data.VariableScaleDecimal")) {
      return new Column(name, Kind.VARIABLE_DECIMAL, 0);
    }
    if (DATES.contains(kind)) {
      return new Column(name, Kind.DATE, 0);
    }
    if (TIMESTAMPS.containsKey(kind)) {
      return new Column(name, Kind.TIMESTAMP, TIMESTAMPS.get(kind));
    }
    if (TIMES.containsKey(kind)) {
      return new Column(name, Kind.TIME, TIMES.get(kind));
    }
    return new Column(name, Kind.KEEP, 0);
  }

  /** Column {@code c}'s value at {@code i} written to {@code out}; the index past it, or -1. */
  static int value(Column c, byte[] b, int i, Encoding.Buffer out) {
    if (i < b.length && b[i] == 'n') { // null: kept
      return Canonical.value(b, i, out, 2);
    }
    switch (c.kind) {
      case KEEP:
        return Canonical.value(b, i, out, 2);
      case DECIMAL:
        return decimal(b, i, c.per, out);
      case VARIABLE_DECIMAL:
        return variableDecimal(b, i, out);
      case DATE:
        return date(b, i, out);
      case TIMESTAMP:
      case TIME:
        return moment(b, i, c, out);
      default:
        return -1;
    }
  }

  /** Base64 big-endian two's complement (no escapes, padded) and a scale: its digits. */
  private static int decimal(byte[] b, int i, long scale, Encoding.Buffer out) {
    int end = i < b.length && b[i] == '"' ? Json.string(b, i, false) : -1;
    BigInteger unscaled = end < 0 ? null : unscaled(b, i + 1, end - 1);
    if (unscaled == null) {
      return -1;
    }
    decimal(unscaled, scale, out);
    return end;
  }

  /** A decimal's digits: its unscaled value (big-endian two's complement, Connect's) and scale. */
  static void decimal(long unscaled, long scale, Encoding.Buffer out) {
    if (unscaled == Long.MIN_VALUE || scale < -SHORT_SCALE || scale > SHORT_SCALE) {
      decimal(BigInteger.valueOf(unscaled), scale, out);
      return;
    }
    if (unscaled < 0) {
      out.put('-');
    }
    magnitude(Math.abs(unscaled), scale, out);
  }

  /** A decimal's magnitude (a long, at least 0) at a scale within {@code SHORT_SCALE}. */
  private static void magnitude(long v, long scale, Encoding.Buffer out) {
    if (scale <= 0) {
      Digits.put(out, v);
      for (long k = v == 0 ? 0 : scale; k < 0; k++) { // zeros after a number that is not 0
        out.put('0');
      }
      return;
    }
    int s = (int) scale;
    boolean whole = s <= 18; // else 10^s is over any long: all of v is after the point
    Digits.put(out, whole ? v / Digits.power(s) : 0); // at least one digit before the point
    out.put('.');
    Digits.put(out, whole ? v % Digits.power(s) : v, s);
  }

  /** A decimal's unscaled value and scale written as its number ({@code 12.30}, {@code -0.05}). */
  static void decimal(BigInteger unscaled, long scale, Encoding.Buffer out) {
    byte[] digits = unscaled.abs().toString().getBytes(StandardCharsets.US_ASCII);
    decimal(digits, 0, digits.length, unscaled.signum() < 0, scale, out);
  }

  /**
   * A decimal whose unscaled value is {@code length} big-endian two's complement bytes at {@code
   * b[from]} (at least one), as {@link #decimal(BigInteger, long, Encoding.Buffer)} writes it;
   * up to 16 bytes without a BigInteger (two longs, their digits nine at a time).
   */
  static void decimal(byte[] b, int from, int length, long scale, Encoding.Buffer out) {
    if (length > 16 || scale < -SHORT_SCALE || scale > SHORT_SCALE) {
      decimal(new BigInteger(b, from, length), scale, out);
      return;
    }
    long hi = b[from] >> 7; // the sign, extended
    long lo = hi;
    for (int k = 0; k < length; k++) {
      hi = (hi << 8) | (lo >>> 56);
      lo = (lo << 8) | (b[from + k] & 0xff);
    }
    if (hi == lo >> 63) {
      decimal(lo, scale, out); // it fits a long
      return;
    }
    boolean negative = hi < 0;
    if (negative) { // the magnitude, at most 2^127: unsigned
      lo = -lo;
      hi = ~hi + (lo == 0 ? 1 : 0);
    }
    // over 10^9 in 32-bit limbs until the rest fits a long; the chunks' nine digits each after
    long l0 = hi >>> 32;
    long l1 = hi & 0xffffffffL;
    long l2 = lo >>> 32;
    long l3 = lo & 0xffffffffL;
    long[] chunks = new long[4]; // 2^127 < 10^39: at most four chunks below a long's rest
    int n = 0;
    while (l0 != 0 || l1 != 0 || (l2 & 0x80000000L) != 0) {
      long part = l0;
      l0 = part / 1_000_000_000L;
      part = ((part % 1_000_000_000L) << 32) | l1; // the remainder < 10^9 < 2^30: no overflow
      l1 = part / 1_000_000_000L;
      part = ((part % 1_000_000_000L) << 32) | l2;
      l2 = part / 1_000_000_000L;
      part = ((part % 1_000_000_000L) << 32) | l3;
      l3 = part / 1_000_000_000L;
      chunks[n++] = part % 1_000_000_000L;
    }
    long rest = (l2 << 32) | l3; // what is left: a long, not zero (the value is over a long)
    if (negative) {
      out.put('-');
    }
    if (scale <= 0) {
      Digits.put(out, rest);
      for (int k = n - 1; k >= 0; k--) {
        Digits.put(out, chunks[k], 9);
      }
      for (long k = scale; k < 0; k++) {
        out.put('0');
      }
      return;
    }
    int mark = out.size;
    Digits.put(out, rest);
    for (int k = n - 1; k >= 0; k--) {
      Digits.put(out, chunks[k], 9);
    }
    point(out, mark, (int) scale);
  }

  /**
   * The point put into the digits written from {@code mark}, {@code scale} from their end (zeros
   * before them, and one before the point, where they are fewer).
   */
  private static void point(Encoding.Buffer out, int mark, int scale) {
    int digits = out.size - mark;
    int whole = digits - scale;
    if (whole > 0) {
      out.room(1);
      System.arraycopy(out.bytes, mark + whole, out.bytes, mark + whole + 1, scale);
      out.bytes[mark + whole] = '.';
      out.size++;
      return;
    }
    int shift = 2 - whole; // "0." and the zeros
    out.room(shift);
    System.arraycopy(out.bytes, mark, out.bytes, mark + shift, digits);
    out.bytes[mark] = '0';
    out.bytes[mark + 1] = '.';
    java.util.Arrays.fill(out.bytes, mark + 2, mark + shift, (byte) '0');
    out.size += shift;
  }

  /** A decimal of the digits {@code [from, to)} of its magnitude, its sign and scale. */
  private static void decimal(
      byte[] digits, int from, int to, boolean negative, long scale, Encoding.Buffer out) {
    if (negative) {
      out.put('-');
    }
    if (scale <= 0) {
      out.put(digits, from, to);
      if (to - from > 1 || digits[from] != '0') { // zeros after a number that is not 0
        for (long k = scale; k < 0; k++) {
          out.put('0');
        }
      }
      return;
    }
    int s = (int) scale;
    int whole = to - from - s; // digits before the point
    if (whole <= 0) {
      out.put('0');
      out.put('.');
      for (int k = whole; k < 0; k++) {
        out.put('0');
      }
      out.put(digits, from, to);
      return;
    }
    out.put(digits, from, from + whole);
    out.put('.');
    out.put(digits, from + whole, to);
  }

  /** As Python's {@code base64.b64decode(text, validate=True)} reads it (only so): a number. */
  private static BigInteger unscaled(byte[] b, int from, int to) {
    int n = to - from;
    if (n == 0 || n % 4 != 0) {
      return null;
    }
    byte[] text = Arrays.copyOfRange(b, from, to);
    byte[] raw;
    try {
      raw = Base64.getDecoder().decode(text);
    } catch (IllegalArgumentException e) {
      return null;
    }
    // the canonical spelling only (no stray bits, '=' only as padding): as both sides read it
    if (raw.length == 0 || !Arrays.equals(Base64.getEncoder().encode(raw), text)) {
      return null;
    }
    return new BigInteger(raw);
  }

  /** {@code {"scale": <int>, "value": "<base64>"}}: the number it holds. */
  private static int variableDecimal(byte[] b, int i, Encoding.Buffer out) {
    if (i >= b.length || b[i] != '{') {
      return -1;
    }
    int[] found = new int[4];
    int end = Members.read(b, i, new byte[][] {SCALE, VALUE}, found, null);
    long scale = end < 0 || found[0] < 0 ? Long.MIN_VALUE : integer(b, found[0], found[1]);
    if (scale == Long.MIN_VALUE || found[2] < 0 || Math.abs(scale) > MAX_SCALE) {
      return -1;
    }
    return decimal(b, found[2], scale, out) < 0 ? -1 : end;
  }

  /** A JSON integer token at {@code [from, to)} within a long (not its lowest); else MIN_VALUE. */
  static long integer(byte[] b, int from, int to) {
    int digits = b[from] == '-' ? from + 1 : from;
    if (to - digits < 1 || to - digits > 19 || Json.number(b, from) != to) {
      return Long.MIN_VALUE;
    }
    long n = 0;
    for (int k = digits; k < to; k++) {
      int d = b[k] - '0';
      if (d < 0 || d > 9 || n > (Long.MAX_VALUE - d) / 10) {
        return Long.MIN_VALUE; // a fraction, an exponent, or beyond a long
      }
      n = n * 10 + d;
    }
    return digits > from ? -n : n;
  }

  private static int date(byte[] b, int i, Encoding.Buffer out) {
    int end = Json.number(b, i);
    long days = end < 0 ? Long.MIN_VALUE : integer(b, i, end);
    return date(days, out) ? end : -1;
  }

  /** A date of {@code days} from the epoch (false: not one Python writes; MIN_VALUE: none). */
  static boolean date(long days, Encoding.Buffer out) {
    if (days == Long.MIN_VALUE) {
      return false;
    }
    try {
      LocalDate day = LocalDate.ofEpochDay(days);
      if (day.getYear() < 1 || day.getYear() > 9999) {
        return false;
      }
      out.put('"');
      day(out, day.getYear(), day.getMonthValue(), day.getDayOfMonth());
      out.put('"');
      return true;
    } catch (DateTimeException e) {
      return false;
    }
  }

  /** A timestamp (from the epoch) or a time of day, in {@code c.per} units per second. */
  private static int moment(byte[] b, int i, Column c, Encoding.Buffer out) {
    int end = Json.number(b, i);
    long count = end < 0 ? Long.MIN_VALUE : integer(b, i, end);
    return moment(count, c, out) ? end : -1;
  }

  /**
   * A timestamp or time of day of {@code count} units ({@code c.per} a second) as Python writes
   * it; false: not one it writes (MIN_VALUE: none).
   */
  static boolean moment(long count, Column c, Encoding.Buffer out) {
    if (count == Long.MIN_VALUE || (c.kind == Kind.TIME && count < 0)) {
      return false;
    }
    long seconds = Math.floorDiv(count, c.per);
    long fraction = Math.floorMod(count, c.per);
    out.put('"');
    if (c.kind == Kind.TIME) {
      put(out, seconds / 3600 < 10 ? "0" + seconds / 3600 : Long.toString(seconds / 3600));
      out.put(':');
      two(out, seconds / 60 % 60);
      out.put(':');
      two(out, seconds % 60);
    } else {
      LocalDateTime moment;
      try {
        moment = LocalDateTime.ofEpochSecond(seconds, 0, ZoneOffset.UTC);
      } catch (DateTimeException e) {
        return false;
      }
      if (moment.getYear() < 1 || moment.getYear() > 9999) {
        return false;
      }
      day(out, moment.getYear(), moment.getMonthValue(), moment.getDayOfMonth());
      out.put('T');
      two(out, moment.getHour());
      out.put(':');
      two(out, moment.getMinute());
      out.put(':');
      two(out, moment.getSecond());
    }
    if (fraction != 0) { // its digits, as many as per's zeros (per: a power of ten)
      out.put('.');
      Digits.put(out, fraction, c.places);
    }
    out.put('"');
    return true;
  }

  /** yyyy-MM-dd, as Python's isoformat (a year from 1 to 9999). */
  private static void day(Encoding.Buffer out, int year, int month, int day) {
    two(out, year / 100);
    two(out, year % 100);
    out.put('-');
    two(out, month);
    out.put('-');
    two(out, day);
  }

  private static void two(Encoding.Buffer out, long n) {
    Digits.put(out, n, 2);
  }

  private static void put(Encoding.Buffer out, String ascii) {
    out.room(ascii.length());
    for (int k = 0; k < ascii.length(); k++) {
      out.bytes[out.size++] = (byte) ascii.charAt(k);
    }
  }
}
