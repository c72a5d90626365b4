package kafkalog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task as the Python planner dealt it: splits read one after the other. */
final class TaskPlan implements InputPartition, Serializable {
  private static final long serialVersionUID = 1L;

  /** A byte range of one segment and the offsets of it to return (kafkalog.spark.plan.Split). */
  static final class Split implements Serializable {
    private static final long serialVersionUID = 1L;
    String topic;
    int partition;
    String directory;
    String segment;
    long baseOffset;
    long startPosition;
    long endPosition; // exclusive; -1 = to the end of the file as it is when read
    long startOffset;
    long endOffset;
    long plannedSize;
    long[] identity; // (device, inode) or null
    boolean lastSegment;
    String json; // as planned, for the Python reader of last resort
  }

  final Split[] splits;
  final Map<String, long[][]> aborted; // directory -> (producerId, first, last)
  final String location;
  final boolean failOnDataLoss;
  final boolean includeHeaders;
  final String[] sources;
  final Long tsLo;
  final Long tsHi;
  final String python;
  final String pythonPath;
  /** false (conf spark.kafkalog.jvm.fallback, for tests): what the Java decoder does not take is
   * an error, not the Python reader's */
  boolean fallback = true;
  /** false (conf spark.kafkalog.jvm.reuseReaders, for benchmarks): every split the Python reader
   * reads starts a reader process of its own, as before readers were kept (PythonReaders) */
  boolean reuseReaders = true;
  /** statsDir: where the task leaves what it read (kafkalog.spark.stats) */
  String statsDir;
  /** counts pushed down: the task answers one row per group (Counts.Reader), or null */
  Counts.Spec counts;
  /** option checkCrcs=false: pushed-down counts take whole batches' counts from their headers
   * after the structural checks alone, the batches unread */
  boolean checkCrcs = true;
  /** verified batch summaries (BatchSummaries) used and kept: option batchSummaries, conf
   * spark.kafkalog.batchSummaries; {@code summaryDir} the conf's directory, null: each
   * executor's own kafkalog cache directory */
  boolean summaries = true;
  String summaryDir;
  /** summary files kept in that directory at most (conf spark.kafkalog.batchSummaries.maxFiles) */
  int summaryFiles = 4096;
  /** how old (ms) a segment's times must be for its summary's stamp to be kept and used (conf
   * spark.kafkalog.batchSummaries.settleMs; BatchSummaries, "settled segments") */
  long summarySettleMs = BatchSummaries.SETTLE_MS;
  /** timestamp filters the scan takes whole: only records with a timestamp in [lo, hi)
   * microseconds (as Spark's column holds it) are returned or counted; null: unbounded */
  Long keepLoUs;
  Long keepHiUs;

  /** whether a record whose timestamp column holds {@code us} is kept by the timestamp filters */
  boolean keepTs(long us) {
    return (keepLoUs == null || us >= keepLoUs) && (keepHiUs == null || us < keepHiUs);
  }

  boolean exactWindow() {
    return keepLoUs != null || keepHiUs != null;
  }

  private TaskPlan(Split[] splits, Map<String, long[][]> aborted, String location, boolean failOnDataLoss,
      boolean includeHeaders, String[] sources, Long tsLo, Long tsHi, String python, String pythonPath) {
    this.splits = splits;
    this.aborted = aborted;
    this.location = location;
    this.failOnDataLoss = failOnDataLoss;
    this.includeHeaders = includeHeaders;
    this.sources = sources;
    this.tsLo = tsLo;
    this.tsHi = tsHi;
    this.python = python;
    this.pythonPath = pythonPath;
  }

  static TaskPlan of(JsonNode t, boolean includeHeaders, String[] sources, Long tsLo, Long tsHi,
      String python, String pythonPath) {
    List<Split> splits = new ArrayList<>();
    for (JsonNode s : t.get("splits")) {
      Split x = new Split();
      x.topic = s.get("topic").asText();
      x.partition = s.get("partition").asInt();
      x.directory = s.get("directory").asText();
      x.segment = s.get("segment").asText();
      x.baseOffset = s.get("base_offset").asLong();
      x.startPosition = s.get("start_position").asLong();
      x.endPosition = s.get("end_position").asLong();
      x.startOffset = s.get("start_offset").asLong();
      x.endOffset = s.get("end_offset").asLong();
      x.plannedSize = s.get("planned_size").asLong();
      JsonNode id = s.get("identity");
      x.identity = id == null || id.isNull() ? null : new long[] {id.get(0).asLong(), id.get(1).asLong()};
      x.lastSegment = s.get("last_segment").asBoolean();
      x.json = s.toString();
      splits.add(x);
    }
    Map<String, long[][]> aborted = new HashMap<>();
    Iterator<Map.Entry<String, JsonNode>> it = t.get("aborted").fields();
    while (it.hasNext()) {
      Map.Entry<String, JsonNode> e = it.next();
      long[][] ranges = new long[e.getValue().size()][];
      int i = 0;
      for (JsonNode r : e.getValue()) ranges[i++] = new long[] {r.get(0).asLong(), r.get(1).asLong(), r.get(2).asLong()};
      aborted.put(e.getKey(), ranges);
    }
    return new TaskPlan(splits.toArray(new Split[0]), aborted, t.path("location").asText(""),
        t.path("failOnDataLoss").asBoolean(true), includeHeaders, sources, tsLo, tsHi, python, pythonPath);
  }

  /** One whole segment file of topic {@code first-task} (FirstTask's): no fallback to the Python
   * reader, no batch summaries. */
  static TaskPlan ofFile(java.nio.file.Path file, long size, String[] sources) {
    Split x = new Split();
    x.topic = "first-task";
    x.directory = file.getParent().toString();
    x.segment = file.toString();
    x.endPosition = size;
    x.endOffset = Long.MAX_VALUE;
    x.plannedSize = size;
    x.lastSegment = true;
    x.json = "{}";
    TaskPlan plan = new TaskPlan(new Split[] {x}, new HashMap<>(), "", true, true, sources, null, null, "", "");
    plan.fallback = false;
    plan.summaries = false;
    return plan;
  }

  boolean wants(String column) {
    for (String s : sources) if (s.equals(column)) return true;
    return false;
  }
}
