package kafkalog.jvm;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Counts pushed down (SupportsPushDownAggregates): {@code count(*)}, and {@code count(c)} of a
 * column that is never null, grouped by nothing, {@code topic} and/or {@code partition}. The
 * records are counted by the tasks' own reader ({@link SplitReader} with no column per record:
 * every batch's CRC checked, whole batches counted from their header, partial or aborted ones
 * walked, anything else the Python reader's), so a count is exactly the rows a full read gives,
 * with the same errors; only the rows Spark would count one by one are not built.
 */
final class Counts {
  private Counts() {}

  /** Kafka columns a record always has (count(c) of them is count(*)); key, value and headers
   * may be null. */
  static final java.util.Set<String> NEVER_NULL =
      java.util.Set.of("topic", "partition", "offset", "timestamp", "timestampType");

  /** What was pushed: the Kafka columns grouped by ("topic" / "partition"), in order, and the
   * number of (count) aggregates. */
  static final class Spec implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final String[] groupBy;
    final String[] names;
    final int counts;

    Spec(String[] groupBy, String[] names, int counts) {
      this.groupBy = groupBy;
      this.names = names;
      this.counts = counts;
    }

    StructType schema() {
      StructType t = new StructType();
      for (int i = 0; i < groupBy.length; i++) {
        t = t.add(names[i], groupBy[i].equals("topic") ? DataTypes.StringType : DataTypes.IntegerType, false);
      }
      for (int i = 0; i < counts; i++) t = t.add(names[groupBy.length + i], DataTypes.LongType, false);
      return t;
    }

    @Override
    public String toString() {
      return "count x" + counts + (groupBy.length == 0 ? "" : " by " + String.join(",", groupBy));
    }
  }

  /** The spec of an aggregation kafkalog counts exactly, or null. {@code sourceOf}: the user's
   * column names to Kafka's. */
  static Spec of(Aggregation aggregation, Map<String, String> sourceOf) {
    List<String> groups = new ArrayList<>();
    List<String> names = new ArrayList<>();
    for (Expression e : aggregation.groupByExpressions()) {
      String source = column(e, sourceOf);
      if (source == null || !(source.equals("topic") || source.equals("partition")) || groups.contains(source)) return null;
      groups.add(source);
      names.add(((NamedReference) e).fieldNames()[0]);
    }
    AggregateFunc[] aggs = aggregation.aggregateExpressions();
    if (aggs.length == 0) return null;
    for (AggregateFunc f : aggs) {
      if (f instanceof CountStar) {
        names.add("count(*)");
      } else if (f instanceof Count) {
        Count c = (Count) f;
        String source = column(c.column(), sourceOf);
        if (c.isDistinct() || source == null || !NEVER_NULL.contains(source)) return null;
        names.add("count(" + source + ")");
      } else {
        return null;
      }
    }
    // distinct names: Spark binds the scan's output by position, a reader of explain() by name
    for (int i = groups.size(); i < names.size(); i++) {
      if (names.subList(0, i).contains(names.get(i))) names.set(i, names.get(i) + "_" + (i - groups.size()));
    }
    return new Spec(groups.toArray(new String[0]), names.toArray(new String[0]), aggs.length);
  }

  private static String column(Expression e, Map<String, String> sourceOf) {
    if (!(e instanceof NamedReference)) return null;
    String[] parts = ((NamedReference) e).fieldNames();
    if (parts.length != 1) return null;
    return KafkaLogScan.anyCase(sourceOf, parts[0]);
  }

  /** Records per group (topic, partition as the spec groups them) of one task's splits. */
  static Map<List<Object>, long[]> count(TaskPlan plan, Spec spec) throws IOException {
    return count(plan, spec, null);
  }

  /** {@link #count}; {@code clean[0]} set false when any of it was the Python reader's. */
  static Map<List<Object>, long[]> count(TaskPlan plan, Spec spec, boolean[] clean) throws IOException {
    Map<List<Object>, long[]> out = new LinkedHashMap<>();
    SplitReader reader = new SplitReader(plan);
    try {
      while (reader.next()) {
        ColumnarBatch b = reader.get();
        if (b.numRows() == 0) continue;
        TaskPlan.Split s = reader.lastSplit();
        List<Object> key = new ArrayList<>(spec.groupBy.length);
        for (String g : spec.groupBy) key.add(g.equals("topic") ? s.topic : (Object) s.partition);
        out.computeIfAbsent(key, k -> new long[1])[0] += b.numRows();
      }
    } finally {
      reader.close();
      if (clean != null && reader.fellBack()) clean[0] = false;
    }
    return out;
  }

  static InternalRow row(Spec spec, List<Object> key, long n) {
    Object[] values = new Object[spec.groupBy.length + spec.counts];
    for (int i = 0; i < key.size(); i++) {
      Object k = key.get(i);
      values[i] = k instanceof String ? UTF8String.fromString((String) k) : k;
    }
    for (int i = 0; i < spec.counts; i++) values[key.size() + i] = n;
    return new GenericInternalRow(values);
  }

  /** Every task counted on the driver, {@code threads} at a time (local mode: the driver's
   * cores are the executors'); the final answer, one row per group (one row when ungrouped). */
  static InternalRow[] onDriver(TaskPlan[] tasks, Spec spec, int threads, boolean[] clean) {
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, Math.min(threads, tasks.length)), r -> {
      Thread t = new Thread(r, "kafkalog-count");
      t.setDaemon(true);
      return t;
    });
    Map<List<Object>, long[]> total = new LinkedHashMap<>();
    try {
      List<Future<Map<List<Object>, long[]>>> parts = new ArrayList<>();
      boolean[][] cleans = new boolean[tasks.length][];
      for (int i = 0; i < tasks.length; i++) {
        TaskPlan t = tasks[i];
        boolean[] c = cleans[i] = new boolean[] {true};
        parts.add(pool.submit(() -> count(t, spec, c)));
      }
      for (Future<Map<List<Object>, long[]>> f : parts) {
        for (Map.Entry<List<Object>, long[]> e : f.get().entrySet()) {
          total.computeIfAbsent(e.getKey(), k -> new long[1])[0] += e.getValue()[0];
        }
      }
      for (boolean[] c : cleans) if (!c[0]) clean[0] = false;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("kafkalog: interrupted while counting", e);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof RuntimeException) throw (RuntimeException) cause;
      throw new IllegalStateException(cause.getMessage(), cause);
    } finally {
      pool.shutdownNow();
    }
    if (spec.groupBy.length == 0) return new InternalRow[] {row(spec, List.of(), total.isEmpty() ? 0 : total.get(List.of())[0])};
    List<InternalRow> rows = new ArrayList<>();
    for (Map.Entry<List<Object>, long[]> e : total.entrySet()) rows.add(row(spec, e.getKey(), e.getValue()[0]));
    return rows.toArray(new InternalRow[0]);
  }

  /** One task's partial counts, one row per group it read (one row when ungrouped, 0 too: Spark
   * sums the tasks' rows, and a sum of none would be null). */
  static final class Reader implements PartitionReader<ColumnarBatch> {
    private final TaskPlan plan;
    private final Spec spec;
    private ColumnarBatch batch;
    private boolean done;

    Reader(TaskPlan plan, Spec spec) {
      this.plan = plan;
      this.spec = spec;
    }

    @Override
    public boolean next() throws IOException {
      if (done) return false;
      done = true;
      Map<List<Object>, long[]> counts = count(plan, spec);
      if (spec.groupBy.length == 0 && counts.isEmpty()) counts.put(List.of(), new long[1]);
      int n = counts.size();
      if (n == 0) return false;
      ColumnVector[] cols = new ColumnVector[spec.groupBy.length + spec.counts];
      List<List<Object>> keys = new ArrayList<>(counts.keySet());
      for (int g = 0; g < spec.groupBy.length; g++) {
        if (spec.groupBy[g].equals("topic")) {
          byte[][] base = new byte[n][];
          int[] off = new int[n];
          int[] len = new int[n];
          for (int r = 0; r < n; r++) {
            base[r] = ((String) keys.get(r).get(g)).getBytes(java.nio.charset.StandardCharsets.UTF_8);
            len[r] = base[r].length;
          }
          cols[g] = new Cols.Bytes(DataTypes.StringType, base, off, len, n);
        } else {
          int[] v = new int[n];
          for (int r = 0; r < n; r++) v[r] = (Integer) keys.get(r).get(g);
          cols[g] = new Cols.Ints(v);
        }
      }
      long[] v = new long[n];
      for (int r = 0; r < n; r++) v[r] = counts.get(keys.get(r))[0];
      for (int c = 0; c < spec.counts; c++) cols[spec.groupBy.length + c] = new Cols.Longs(DataTypes.LongType, v);
      batch = new ColumnarBatch(cols, n);
      return true;
    }

    @Override
    public ColumnarBatch get() {
      return batch;
    }

    @Override
    public void close() {}
  }
}
