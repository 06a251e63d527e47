package dev.highwater.encoding;

import java.util.Arrays;

/**
 * The members of a Debezium event's source and transaction that {@link EventPlace} reads, each
 * as what it is (absent, null, a boolean, an integer, a text, anything else), however the
 * event was read: from its JSON ({@link #json}), or from its Avro datum straight ({@link
 * AvroEvent}: no JSON written and parsed again). A text is its UTF-8 in {@link #bytes}, and
 * whether its JSON form has an escape ({@code \}), as a JSON reader of it would see.
 */
final class SourceValues {
  static final int ABSENT = 0;
  static final int NULL = 1;
  static final int TRUE = 2;
  static final int FALSE = 3;
  static final int INTEGER = 4; // a long (Long.MIN_VALUE: a number that is not one)
  static final int TEXT = 5;
  static final int OTHER = 6; // an object or array

  final int[] kind; // per member: one of the above
  final long[] integer; // INTEGER: its value
  final int[] from; // TEXT: its UTF-8's bounds in bytes (JSON: inside the quotes)
  final int[] to;
  final boolean[] escaped; // TEXT: its JSON form has an escape
  byte[] bytes;
  boolean json; // the texts are JSON's, their escapes not undone
  boolean transaction; // the event's transaction block is there (metadata on)

  SourceValues(int members) {
    kind = new int[members];
    integer = new long[members];
    from = new int[members];
    to = new int[members];
    escaped = new boolean[members];
  }

  /** All absent, texts in {@code b}. */
  void reset(byte[] b, boolean fromJson) {
    Arrays.fill(kind, ABSENT);
    bytes = b;
    json = fromJson;
    transaction = false;
  }

  /** Member {@code k} from its JSON value at {@code b[from, to)} ({@link Members#read}'s). */
  void json(int k, byte[] b, int start, int end) {
    if (start < 0) {
      kind[k] = ABSENT;
      return;
    }
    switch (b[start]) {
      case 'n':
        kind[k] = NULL;
        return;
      case 't':
        kind[k] = TRUE;
        return;
      case 'f':
        kind[k] = FALSE;
        return;
      case '{':
      case '[':
        kind[k] = OTHER;
        return;
      case '"':
        text(k, start + 1, end - 1, Json.string(b, start, false) != end);
        return;
      default:
        kind[k] = INTEGER;
        integer[k] = Connect.integer(b, start, end);
    }
  }

  /** Member {@code k} is the text at {@code bytes[start, end)}. */
  void text(int k, int start, int end, boolean hasEscape) {
    kind[k] = TEXT;
    from[k] = start;
    to[k] = end;
    escaped[k] = hasEscape;
  }

  /** Member {@code k} is the integer {@code value}. */
  void integer(int k, long value) {
    kind[k] = INTEGER;
    integer[k] = value;
  }

  /** Member {@code k}'s value is there and not null. */
  boolean given(int k) {
    return kind[k] != ABSENT && kind[k] != NULL;
  }

  /** Member {@code k}'s integer; Long.MIN_VALUE when it is not one. */
  long integer(int k) {
    return kind[k] == INTEGER ? integer[k] : Long.MIN_VALUE;
  }

  /** Member {@code k} is the text {@code utf8}, written without escapes. */
  boolean is(int k, byte[] utf8) {
    return kind[k] == TEXT
        && !escaped[k]
        && Arrays.equals(bytes, from[k], to[k], utf8, 0, utf8.length);
  }

  /** Member {@code k} is a text written without escapes. */
  boolean plainText(int k) {
    return kind[k] == TEXT && !escaped[k];
  }
}
