"""Issue 50 item 1: one held-out source (12,000 changes, 6 partitions) drained on the dev
cluster (3 Kafka nodes, Spark standalone, 2 one-core workers) by an available-now changefeed,
at least once then exactly once; prints seconds, batches, transactions committed/aborted,
output records (read_committed) and marks phases on stderr for counting 'Lost task'."""
import collections, sys, tempfile, time
from pathlib import Path

from pipeline.config import SparkConfig
from pipeline.core.changefeed import Changefeed
from pipeline.dev.bench import _config
from pipeline.dev.cluster import KafkaCluster
from pipeline.dev.generator import GeneratorSpec, write
from pipeline.dev.spark_cluster import SparkCluster
from pipeline.runtime.session import build_session
from tests.support.kafka import consume_all

import os
import pipeline.dev.bench as _bench
_W = os.environ.get("HW50_WHERE")
if _W:
    _orig = _bench.parse_config
    _bench.parse_config = lambda d, env: _orig({**d, "encoder": {**d["encoder"], "where": _W}}, env=env)
ROWS, PARTS, MAX = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
keep = Path(sys.argv[4])
keep.mkdir(parents=True, exist_ok=True)


def drain(spark, bootstrap, name, delivery):
    config = _config(bootstrap, name, "m.orders", None, delivery,
                     trigger={"available_now": True}, max_offsets_per_trigger=MAX)
    cf = Changefeed(config, spark)
    import datetime
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    print(f"=== PHASE {name} start", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    cf.run()
    t1 = time.perf_counter()
    print(f"=== PHASE {name} end", file=sys.stderr, flush=True)
    st = cf.stats
    reg = cf.metrics.registry
    get = lambda o: int(reg.get_sample_value("highwater_transactions_total",
                                             {"changefeed": name, "outcome": o}) or 0)
    out = consume_all(bootstrap, f"{name}.orders")
    rows = [m for m in out if m.value is not None and b'"resolved"' not in m.value[:20]]
    keys = collections.Counter((m.key, m.value) for m in rows)
    dups = sum(c - 1 for c in keys.values() if c > 1)
    q = cf.query
    nb = len([p for p in (q.recentProgress if q is not None else []) if p.durationMs.get("addBatch")])
    stream = (st.stream_ended or t1) - (st.stream_started or t0)
    inside = sum(w for w, _ in st.batch_seconds)
    print(f"RESULT {name} {delivery}: stream {stream:.1f}s, {nb} batches ({len(st.batch_seconds)} timed), "
          f"{inside:.1f}s writing inside batches, {sum(b for _, b in st.batch_seconds):.1f}s in "
          f"foreachBatch; transactions committed {get('committed')}, aborted {get('aborted')}; "
          f"output records {len(out)} ({len(rows)} rows), identical repeats {dups}", flush=True)
    try:
        import json, urllib.request
        sc = spark.sparkContext
        url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?details=true"
        stages = json.load(urllib.request.urlopen(url, timeout=60))
        seq, failed, execs = [], 0, collections.Counter()
        for st_ in sorted(stages, key=lambda x: x["stageId"]):
            if st_.get("submissionTime", "") < since:
                continue
            tasks = list((st_.get("tasks") or {}).values())
            failed += sum(1 for t in tasks if t.get("status") == "FAILED")
            for t in tasks:
                execs[t.get("executorId")] += 1
            if st_["numTasks"] <= PARTS and tasks:
                ok = sorted((t["index"], t["executorId"]) for t in tasks if t.get("status") == "SUCCESS")
                seq.append("".join(e for _, e in ok))
        print(f"TASKS {name}: failed {failed}, per executor {dict(execs)}, 2-task stages' executors "
              f"by task index: {' '.join(seq)}", flush=True)
    except Exception as exc:  # noqa
        print(f"TASKS {name}: REST failed {exc!r}", flush=True)
    return stream


with tempfile.TemporaryDirectory(prefix="hw50-", dir=keep) as scratch:
    kafka = KafkaCluster(Path(scratch) / "cluster", heap="1g")
    workers = SparkCluster(Path(scratch) / "cluster", workers=2)
    try:
        bootstrap = kafka.start().bootstrap_servers
        master = workers.start().master_url
        spark = build_session(SparkConfig(master=master, conf={"spark.driver.memory": "2g",
                              "spark.executor.memory": "1g"}), "hw50")
        report = write(GeneratorSpec(topic="m.orders", rows=ROWS, partitions=PARTS,
                                     resolved_every=10_000, seed=1), {"bootstrap.servers": bootstrap})
        print(f"generated {report.total} changes + {report.markers} markers on {PARTS} partitions",
              flush=True)
        drain(spark, bootstrap, "warm", "at_least_once")
        alo = drain(spark, bootstrap, "alo", "at_least_once")
        eo = drain(spark, bootstrap, "eo", "exactly_once")
        print(f"RATIO exactly once / at least once (stream seconds): {alo / eo:.2f}", flush=True)
        spark.stop()
    finally:
        import subprocess
        subprocess.run(["bash", "-c", f"grep -rh 'opening it anew' {scratch} | wc -l | sed 's/^/REOPENED log lines: /'; "
                        f"grep -rhc 'ProducerFenced' {scratch} --include=stderr | paste -sd+ | bc | sed 's/^/executor stderr ProducerFenced lines: /'"])
        workers.stop()
        kafka.stop()
