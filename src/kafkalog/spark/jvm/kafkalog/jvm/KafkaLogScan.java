package kafkalog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.CompositeReadLimit;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.sources.StringStartsWith;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import scala.Option;

/** The scan: columns Spark asks for, filters turned into the Python planner's bounds. */
final class KafkaLogScan implements Scan {
  static final String FALLBACK_CONF = "spark.kafkalog.jvm.fallback";
  /** conf: false turns verified batch summaries off (BatchSummaries); {@code .dir} where they
   * are kept (default: kafkalog's cache directory on each machine) */
  static final String SUMMARIES_CONF = "spark.kafkalog.batchSummaries";
  private final Map<String, String> options;
  private final StructType readSchema;
  private final String[] sources; // the Kafka column of each output column
  private final List<ObjectNode> filters;
  /** counts pushed down (each task answers one row per group), or null */
  private final Counts.Spec counts;
  /** the timestamps [lo, hi) in microseconds (null: unbounded) the scan returns alone: Spark
   * does not filter them again (Builder.pushFilters) */
  private final Long keepLoUs;
  private final Long keepHiUs;

  KafkaLogScan(Map<String, String> options, StructType readSchema, String[] sources, List<ObjectNode> filters,
      Counts.Spec counts, Long keepLoUs, Long keepHiUs) {
    this.options = options;
    this.readSchema = readSchema;
    this.sources = sources;
    this.filters = filters;
    this.counts = counts;
    this.keepLoUs = keepLoUs;
    this.keepHiUs = keepHiUs;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    return "kafkalog (JVM) " + options.getOrDefault("path", "") + " columns=" + String.join(",", sources)
        + " filters=" + filters.size()
        + (keepLoUs == null && keepHiUs == null ? "" : " timestamps [" + keepLoUs + ", " + keepHiUs + ") us exact")
        + (counts == null ? "" : " pushed aggregate: " + counts + " (per task)");
  }

  /** An option by name, any case (the planner checked its value at load()). */
  private String option(String name) {
    return anyCase(options, name);
  }

  /** The value of {@code map} under {@code name} in any case (options, columns), or null. */
  static String anyCase(Map<String, String> map, String name) {
    for (Map.Entry<String, String> e : map.entrySet()) if (e.getKey().equalsIgnoreCase(name)) return e.getValue();
    return null;
  }

  /** The tasks of this scan, as the Python planner deals them. */
  TaskPlan[] plan() {
    return tasks(askPlan().answer);
  }

  private KeptAnswers.Asked askPlan() {
    ObjectNode req = Bridge.request("plan", options);
    ArrayNode f = req.putArray("filters");
    for (ObjectNode n : filters) f.add(n);
    // the planner keeps each partition's plan while its files stay as they were (plan_memo),
    // unless nothing is to be kept (planCache=false: asked and planned every time)
    req.put("memo", !"false".equalsIgnoreCase(Bridge.conf(KeptAnswers.CONF)));
    req.put("settleMs", KeptAnswers.settleMs());
    return KeptAnswers.asked(req, options);
  }

  /** this scan's batch: one per scan, as Spark's own file scans are their batch (Spark asks
   * toBatch() more than once per query: a batch each time planned each query twice, ~1 s per
   * plan over an object store, and no two of its scan nodes were ever equal) */
  private Batch batch;

  @Override
  public synchronized Batch toBatch() {
    if (batch == null) batch = newBatch();
    return batch;
  }

  private Batch newBatch() {
    return new Batch() {
      private InputPartition[] planned;

      @Override
      public synchronized InputPartition[] planInputPartitions() {
        if (planned == null) planned = plan();
        return planned;
      }

      @Override
      public PartitionReaderFactory createReaderFactory() {
        return new Factory();
      }
    };
  }

  TaskPlan[] tasks(JsonNode answer) {
    boolean headers = answer.path("includeHeaders").asBoolean(false);
    JsonNode b = answer.path("bounds");
    Long tsLo = b.hasNonNull("tsLo") ? b.get("tsLo").asLong() : null;
    Long tsHi = b.hasNonNull("tsHi") ? b.get("tsHi").asLong() : null;
    String[] py = Bridge.pythonOf();
    List<TaskPlan> out = new ArrayList<>();
    boolean fallback = !"false".equals(Bridge.conf(FALLBACK_CONF));
    boolean reuseReaders = !"false".equals(Bridge.conf("spark.kafkalog.jvm.reuseReaders"));
    boolean summaries = summariesOn();
    String summaryDir = Bridge.conf(SUMMARIES_CONF + ".dir");
    int summaryFiles = 4096;
    try {
      String max = Bridge.conf(SUMMARIES_CONF + ".maxFiles");
      if (max != null) summaryFiles = Math.max(1, Integer.parseInt(max.trim()));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("kafkalog: " + SUMMARIES_CONF + ".maxFiles must be a positive number", e);
    }
    long summarySettleMs = BatchSummaries.SETTLE_MS;
    try {
      String settle = Bridge.conf(BatchSummaries.SETTLE_CONF);
      if (settle != null) summarySettleMs = Math.max(0, Long.parseLong(settle.trim()));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("kafkalog: " + BatchSummaries.SETTLE_CONF + " must be a number of milliseconds", e);
    }
    for (JsonNode t : answer.get("tasks")) {
      TaskPlan task = TaskPlan.of(t, headers, sources, tsLo, tsHi, py[0], py[1]);
      task.fallback = fallback;
      task.reuseReaders = reuseReaders;
      task.statsDir = answer.hasNonNull("statsDir") ? answer.get("statsDir").asText() : null;
      task.counts = counts;
      task.checkCrcs = !"false".equalsIgnoreCase(option("checkCrcs"));
      task.summaries = summaries;
      task.summaryDir = summaryDir;
      task.summaryFiles = summaryFiles;
      task.summarySettleMs = summarySettleMs;
      task.keepLoUs = keepLoUs;
      task.keepHiUs = keepHiUs;
      out.add(task);
    }
    return out.toArray(new TaskPlan[0]);
  }

  /** Whether verified batch summaries serve this scan (the option, else the conf). */
  private boolean summariesOn() {
    String summariesOption = option("batchSummaries");
    return summariesOption != null
        ? !"false".equalsIgnoreCase(summariesOption)
        : !"false".equalsIgnoreCase(Bridge.conf(SUMMARIES_CONF));
  }

  /** What a driver count over {@code answer} is kept under beside its plan (null: not kept):
   * the count, its columns, the CRC choice and the summaries' directory (another one is another
   * machine's cache, whose first count reads as a first count does: the bench's cold rows). */
  private String countKey(JsonNode answer) {
    if (answer.path("tasks").size() == 0 || !summariesOn()) return null;
    return "counts " + counts + " " + String.join(",", counts.names) + " checkCrcs="
        + !"false".equalsIgnoreCase(option("checkCrcs")) + " summaries=" + Bridge.conf(SUMMARIES_CONF + ".dir");
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    StreamWarmup.atStreamStart(); // once per local application, beside the first micro-batch
    return new Stream();
  }

  static final class Factory implements PartitionReaderFactory {
    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("kafkalog reads columnar batches only");
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      TaskPlan task = (TaskPlan) partition;
      if (task.counts != null) return new Counts.Reader(task, task.counts);
      return new SplitReader(task);
    }
  }

  /** A stream: offsets, limits and micro-batch plans are the Python stream reader's answers. */
  final class Stream implements MicroBatchStream, SupportsTriggerAvailableNow {
    private final String id = UUID.randomUUID().toString();
    private Long maxRows;
    private boolean opened;

    /** Trigger.AvailableNow's target, as the planner fixed it (null before). */
    private JsonNode target;

    private JsonNode call(String method, ObjectNode req) {
      req.put("op", "stream");
      req.put("id", id);
      req.put("method", method);
      for (int attempt = 0; ; attempt++) {
        if (!opened) {
          ObjectNode open = Bridge.request("stream_open", options);
          open.put("id", id);
          if (target != null) open.set("target", target);
          JsonNode answer = Bridge.ask(open);
          maxRows = answer.hasNonNull("maxRows") ? answer.get("maxRows").asLong() : null;
          opened = true;
        }
        JsonNode answer = Bridge.ask(req);
        // a planner that does not know this stream is a new one (the one it was opened on
        // ended): open it there again, with the AvailableNow target it had, and ask again
        if (answer.path("unknownStream").asBoolean(false) && attempt == 0) {
          opened = false;
          continue;
        }
        if (answer.has("target")) target = answer.get("target");
        return answer;
      }
    }

    private ObjectNode req() {
      return Bridge.JSON.createObjectNode();
    }

    private JsonNode parse(Offset o) {
      try {
        return Bridge.JSON.readTree(o.json());
      } catch (java.io.IOException e) {
        throw new IllegalArgumentException("kafkalog: bad offsets " + o.json(), e);
      }
    }

    @Override
    public Offset initialOffset() {
      return new Json(call("initialOffset", req()).get("offset").toString());
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
      call("ping", req());
      return maxRows == null ? ReadLimit.allAvailable() : ReadLimit.maxRows(maxRows);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
      call("prepareForTriggerAvailableNow", req());
    }

    @Override
    public Offset latestOffset() {
      throw new UnsupportedOperationException("latestOffset(start, limit) is used");
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
      ObjectNode req = req();
      req.set("start", parse(start));
      Long rows = maxRowsOf(limit);
      if (rows != null) req.put("maxRows", rows);
      return new Json(call("latestOffset", req).get("offset").toString());
    }

    private Long maxRowsOf(ReadLimit limit) {
      if (limit instanceof ReadMaxRows) return ((ReadMaxRows) limit).maxRows();
      if (limit instanceof CompositeReadLimit) {
        for (ReadLimit l : ((CompositeReadLimit) limit).getReadLimits()) {
          Long r = maxRowsOf(l);
          if (r != null) return r;
        }
      }
      return null;
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      ObjectNode req = req();
      req.set("start", parse(start));
      req.set("end", parse(end));
      return tasks(call("partitions", req));
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new Factory();
    }

    @Override
    public Offset deserializeOffset(String json) {
      return new Json(json);
    }

    @Override
    public void commit(Offset end) {}

    @Override
    public void stop() {
      if (opened) call("stop", req());
    }
  }

  static final class Json extends Offset {
    private final String json;

    Json(String json) {
      this.json = json;
    }

    @Override
    public String json() {
      return json;
    }
  }

  /** Counts answered on the driver (local mode: its cores are the executors'), every task's
   * reader run there: no scan task, the same bytes read and checked. */
  static final class DriverCounts implements LocalScan {
    private final KafkaLogScan scan;

    DriverCounts(KafkaLogScan scan) {
      this.scan = scan;
    }

    @Override
    public StructType readSchema() {
      return scan.readSchema;
    }

    @Override
    public String description() {
      return scan.description().replace("(per task)", "(on the driver)");
    }

    /**
     * The counts of the scan's plan. A count made with verified batch summaries on, over a
     * plan kept while the log's files stay as they were (KeptAnswers), is kept with that plan
     * and is the answer again until a file changes: the same files give the same count, and
     * with summaries on the user has accepted a batch verified once as verified (the count
     * over summaries reads headers only). A count that handed anything to the Python reader
     * (damage skipped with failOnDataLoss=false, said in a warning) is made again each time,
     * so said again.
     */
    @Override
    public InternalRow[] rows() {
      int threads = SparkSession.active().sparkContext().defaultParallelism();
      KeptAnswers.Asked plan = scan.askPlan();
      String key = plan.kept != null ? scan.countKey(plan.answer) : null;
      if (key != null) {
        Object done = plan.kept.derived.get(key);
        if (done != null) return ((InternalRow[]) done).clone(); // no task built, nothing read
      }
      TaskPlan[] tasks = scan.tasks(plan.answer);
      boolean keep = key != null;
      boolean[] clean = {true};
      InternalRow[] rows = Counts.onDriver(tasks, scan.counts, threads, clean);
      if (keep && clean[0]) plan.kept.derived.put(key, rows.clone());
      return rows;
    }
  }

  /** conf: false keeps pushed-down counts in Spark tasks even in local mode (tests) */
  static final String DRIVER_COUNTS_CONF = "spark.kafkalog.jvm.driverCounts";

  static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters,
      SupportsPushDownAggregates {
    private final Map<String, String> options;
    private StructType schema;
    private final Map<String, String> sourceOf;
    private final List<ObjectNode> pushed = new ArrayList<>();
    /** filters handed back to Spark (it evaluates them on the rows read) */
    private final List<Filter> returned = new ArrayList<>();
    /** timestamp filters the scan takes whole: [lo, hi) in microseconds, null unbounded */
    private Long keepLoUs;
    private Long keepHiUs;
    private Filter[] pushedFilters = new Filter[0];
    private Counts.Spec counts;
    private boolean complete;

    Builder(Map<String, String> options, StructType schema, Map<String, String> sourceOf) {
      this.options = options;
      this.schema = schema;
      this.sourceOf = sourceOf;
    }

    @Override
    public void pruneColumns(StructType required) {
      schema = required;
    }

    /**
     * Every filter the planner can prune by goes to it (safe pruning: never a matching row
     * dropped). Comparisons of {@code timestamp} with a timestamp, and {@code IS NOT NULL} of a
     * column never null, the scan also takes whole: its reader drops every record outside the
     * timestamps in microseconds, as Spark would (SplitReader.keepTs; the Python reader's rows
     * too, PythonRest), so Spark does not evaluate them again, and a count over a timestamp
     * window is pushed down as a count is (answered on the driver in local mode). Every other
     * filter is handed back to Spark, which evaluates it on the rows read.
     */
    @Override
    public Filter[] pushFilters(Filter[] filters) {
      List<Filter> used = new ArrayList<>();
      if (!pushdown()) return filters;
      for (Filter f : filters) {
        ObjectNode n = toJson(f);
        if (n != null) {
          pushed.add(n);
          used.add(f);
        }
        if (!takeWhole(f, n)) returned.add(f);
      }
      pushedFilters = used.toArray(new Filter[0]);
      return returned.toArray(new Filter[0]);
    }

    /** Whether the scan alone returns exactly the rows {@code f} keeps (its JSON: {@code n}). */
    private boolean takeWhole(Filter f, ObjectNode n) {
      if (f instanceof IsNotNull) {
        String source = sourceOf(((IsNotNull) f).attribute());
        return source != null && Counts.NEVER_NULL.contains(source);
      }
      if (n == null || !"timestamp".equals(n.path("attribute").asText())) return false;
      Object value;
      if (f instanceof EqualTo) value = ((EqualTo) f).value();
      else if (f instanceof GreaterThan) value = ((GreaterThan) f).value();
      else if (f instanceof GreaterThanOrEqual) value = ((GreaterThanOrEqual) f).value();
      else if (f instanceof LessThan) value = ((LessThan) f).value();
      else if (f instanceof LessThanOrEqual) value = ((LessThanOrEqual) f).value();
      else return false;
      Object micros = literal(value);
      if (!(micros instanceof Map) || !(((Map<?, ?>) micros).get("micros") instanceof Long)) return false;
      long v = (Long) ((Map<?, ?>) micros).get("micros");
      String op = n.get("op").asText();
      Long lo = null;
      Long hi = null;
      try {
        switch (op) {
          case "EqualTo": lo = v; hi = Math.addExact(v, 1); break;
          case "GreaterThan": lo = Math.addExact(v, 1); break;
          case "GreaterThanOrEqual": lo = v; break;
          case "LessThan": hi = v; break;
          case "LessThanOrEqual": hi = Math.addExact(v, 1); break;
          default: return false;
        }
      } catch (ArithmeticException e) {
        return false; // at the end of the long range: Spark filters
      }
      if (lo != null) keepLoUs = keepLoUs == null ? lo : Math.max(keepLoUs, lo);
      if (hi != null) keepHiUs = keepHiUs == null ? hi : Math.min(keepHiUs, hi);
      return true;
    }

    private String sourceOf(String attribute) {
      return anyCase(sourceOf, attribute);
    }

    @Override
    public Filter[] pushedFilters() {
      return pushedFilters;
    }

    private ObjectNode toJson(Filter f) {
      String op;
      String attribute;
      Object value;
      if (f instanceof EqualTo) {
        op = "EqualTo"; attribute = ((EqualTo) f).attribute(); value = ((EqualTo) f).value();
      } else if (f instanceof EqualNullSafe) {
        op = "EqualNullSafe"; attribute = ((EqualNullSafe) f).attribute(); value = ((EqualNullSafe) f).value();
      } else if (f instanceof GreaterThan) {
        op = "GreaterThan"; attribute = ((GreaterThan) f).attribute(); value = ((GreaterThan) f).value();
      } else if (f instanceof GreaterThanOrEqual) {
        op = "GreaterThanOrEqual"; attribute = ((GreaterThanOrEqual) f).attribute(); value = ((GreaterThanOrEqual) f).value();
      } else if (f instanceof LessThan) {
        op = "LessThan"; attribute = ((LessThan) f).attribute(); value = ((LessThan) f).value();
      } else if (f instanceof LessThanOrEqual) {
        op = "LessThanOrEqual"; attribute = ((LessThanOrEqual) f).attribute(); value = ((LessThanOrEqual) f).value();
      } else if (f instanceof StringStartsWith) {
        op = "StringStartsWith"; attribute = ((StringStartsWith) f).attribute(); value = ((StringStartsWith) f).value();
      } else if (f instanceof In) {
        op = "In"; attribute = ((In) f).attribute(); value = ((In) f).values();
      } else {
        return null;
      }
      String source = sourceOf(attribute);
      if (source == null) return null;
      ObjectNode n = Bridge.JSON.createObjectNode();
      n.put("op", op);
      n.put("attribute", source);
      if (value instanceof Object[]) {
        ArrayNode a = n.putArray("value");
        for (Object v : (Object[]) value) {
          Object j = literal(v);
          if (j == BAD) return null;
          a.addPOJO(j);
        }
      } else {
        Object j = literal(value);
        if (j == BAD) return null;
        n.putPOJO("value", j);
      }
      return n;
    }

    private static final Object BAD = new Object();

    private static Object literal(Object v) {
      if (v == null || v instanceof String || v instanceof Boolean) return v;
      if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) {
        return ((Number) v).longValue();
      }
      long micros;
      if (v instanceof java.sql.Timestamp) {
        java.sql.Timestamp t = (java.sql.Timestamp) v;
        micros = Math.floorDiv(t.getTime(), 1000) * 1_000_000L + t.getNanos() / 1000;
      } else if (v instanceof Instant) {
        Instant i = (Instant) v;
        micros = i.getEpochSecond() * 1_000_000L + i.getNano() / 1000;
      } else if (v instanceof java.time.LocalDateTime) {
        return BAD; // timestamp_ntz is not a Kafka column type
      } else {
        return BAD;
      }
      return Map.of("micros", micros);
    }

    /** false with register(pushdown=False) (the conf) or the query's option pushdown=false:
     * a real full scan, no filter taken and no aggregate pushed (the escape hatch) */
    private boolean pushdown() {
      if ("false".equals(Bridge.conf("spark.kafkalog.pushdown"))) return false;
      String option = anyCase(options, "pushdown");
      return option == null || !"false".equalsIgnoreCase(option.trim());
    }

    /** The driver answers a count whole when the session is local (see DriverCounts). */
    private static boolean onDriver() {
      Option<SparkSession> active = SparkSession.getActiveSession();
      if (active.isEmpty()) return false;
      return active.get().sparkContext().isLocal() && !"false".equals(Bridge.conf(DRIVER_COUNTS_CONF));
    }

    @Override
    public boolean supportCompletePushDown(Aggregation aggregation) {
      return pushdown() && returned.isEmpty() && Counts.of(aggregation, sourceOf) != null && onDriver();
    }

    @Override
    public boolean pushAggregation(Aggregation aggregation) {
      if (!pushdown() || !returned.isEmpty()) return false;
      counts = Counts.of(aggregation, sourceOf);
      complete = counts != null && onDriver();
      return counts != null;
    }

    @Override
    public Scan build() {
      if (counts != null) {
        KafkaLogScan scan = new KafkaLogScan(options, counts.schema(), new String[0], pushed, counts, keepLoUs, keepHiUs);
        return complete ? new DriverCounts(scan) : scan;
      }
      String[] sources = new String[schema.fields().length];
      int i = 0;
      for (StructField f : schema.fields()) {
        String source = sourceOf(f.name());
        if (source == null) throw new IllegalArgumentException("kafkalog: unknown column " + f.name());
        sources[i++] = source;
      }
      return new KafkaLogScan(options, schema, sources, pushed, null, keepLoUs, keepHiUs);
    }
  }
}
