package dev.highwater.walk;

import dev.highwater.encoding.Encoding;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.function.Supplier;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A task's walked records as Spark rows (topic, key, value, headers: {@code Walk.Output}), for
 * looking at what a walk writes instead of sending it: pulled one by one from {@code next}
 * (null at the end), then {@code ended} runs once (the walk's report).
 */
final class Rows implements Iterator<InternalRow> {
  private final Supplier<InternalRow> next;
  private final Runnable ended;
  private InternalRow row;
  private boolean done;

  private Rows(Supplier<InternalRow> next, Runnable ended) {
    this.next = next;
    this.ended = ended;
  }

  static Iterator<InternalRow> of(Supplier<InternalRow> next, Runnable ended) {
    return new Rows(next, ended);
  }

  /** The row of a record to {@code topic}: the encoding's key, value and headers. */
  static InternalRow row(UTF8String topic, Encoding.Encoded out) {
    return new GenericInternalRow(new Object[] {topic, out.key, out.value, headers(out.headers)});
  }

  private static ArrayData headers(Encoding.Headers headers) {
    if (headers == null) {
      return null;
    }
    Object[] pairs = new Object[headers.names.size()];
    for (int k = 0; k < pairs.length; k++) {
      UTF8String name = UTF8String.fromString(headers.names.get(k));
      pairs[k] = new GenericInternalRow(new Object[] {name, headers.values.get(k)});
    }
    return new GenericArrayData(pairs);
  }

  @Override
  public boolean hasNext() {
    if (row == null && !done) {
      row = next.get();
      if (row == null) {
        done = true;
        ended.run();
      }
    }
    return row != null;
  }

  @Override
  public InternalRow next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    InternalRow out = row;
    row = null;
    return out;
  }
}
