package dev.highwater.sink;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/** The executors' own background threads: daemons (a task's end never waits on the pool). */
final class Daemons {
  private Daemons() {}

  /** A pool that grows as work comes, its threads named {@code name}. */
  static ExecutorService pool(String name) {
    return Executors.newCachedThreadPool(
        work -> {
          Thread t = new Thread(work, name);
          t.setDaemon(true);
          return t;
        });
  }
}
