package kafkalog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The rest of a split read by kafkalog's Python reader (a {@code python -m
 * kafkalog.spark.jvm_bridge reader} of {@link PythonReaders}, kept between splits), its rows
 * streamed back as Arrow IPC: damaged bytes fail with the Python source's error naming file and
 * byte, or with failOnDataLoss=false are skipped with its warning. Only the reader's trailer
 * ends a split: a reader that dies before it fails the task naming the split, never short rows.
 */
final class PythonRest implements AutoCloseable {
  private static final BufferAllocator ALLOCATOR = new RootAllocator(Long.MAX_VALUE);

  private final TaskPlan plan;
  private final PythonReaders.Reader process;
  private final ArrowStreamReader reader;
  /** the split and byte handed over, for messages */
  private final String what;
  private boolean answered;
  /** rows of the split handed to Spark so far */
  private long rows;

  private PythonRest(TaskPlan plan, PythonReaders.Reader process, String what) {
    this.plan = plan;
    this.process = process;
    this.what = what;
    this.reader = new ArrowStreamReader(process.rows(), ALLOCATOR);
  }

  static PythonRest start(TaskPlan plan, TaskPlan.Split split, long position, long firstOffset)
      throws IOException {
    ObjectNode req = Bridge.JSON.createObjectNode();
    ObjectNode s = (ObjectNode) Bridge.JSON.readTree(split.json);
    s.put("start_position", position);
    // offsets must grow from here on: what the Java decoder walked before this byte
    s.put("base_offset", firstOffset);
    req.set("split", s);
    req.put("includeHeaders", plan.includeHeaders);
    req.put("failOnDataLoss", plan.failOnDataLoss);
    req.put("location", plan.location);
    if (plan.exactWindow()) {
      // the timestamp filters the scan takes whole: the Python reader drops the rest too
      ArrayNode keep = req.putArray("keepUs");
      if (plan.keepLoUs == null) keep.addNull(); else keep.add(plan.keepLoUs.longValue());
      if (plan.keepHiUs == null) keep.addNull(); else keep.add(plan.keepHiUs.longValue());
    }
    long[][] ranges = plan.aborted.get(split.directory);
    if (ranges != null) { // read_committed: none, or the planned ones (the markers are checked)
      ArrayNode aborted = req.putArray("aborted");
      for (long[] r : ranges) aborted.addArray().add(r[0]).add(r[1]).add(r[2]);
    }
    String what = redacted(split.segment) + " from byte " + position;
    PythonReaders.Reader process = PythonReaders.take(plan.python, plan.pythonPath, plan.reuseReaders);
    try {
      process.send(Bridge.JSON.writeValueAsBytes(req)); // one line: Jackson writes no newline
    } catch (IOException e) {
      PythonReaders.discard(process);
      throw new IOException("kafkalog: the Python reader (pid " + process.process.pid() + ") asked to read " + what
          + " ended (" + process.ending() + "): " + e.getMessage(), e);
    }
    return new PythonRest(plan, process, what);
  }

  /** The next batch of rows, or null at the end (a failure of the Python reader is thrown). */
  ColumnarBatch next() throws IOException {
    JsonNode trailer;
    try {
      while (reader.loadNextBatch()) {
        VectorSchemaRoot root = reader.getVectorSchemaRoot();
        if (root.getRowCount() == 0) continue;
        ColumnVector[] cols = new ColumnVector[plan.sources.length];
        for (int i = 0; i < cols.length; i++) cols[i] = new ArrowColumnVector(root.getVector(plan.sources[i]));
        rows += root.getRowCount();
        return new ColumnarBatch(cols, root.getRowCount());
      }
      trailer = process.trailer();
    } catch (IOException e) {
      throw died(e);
    }
    answered = true;
    for (JsonNode line : trailer.path("lines")) PythonReaders.say(line.asText());
    PythonReaders.give(process, plan.reuseReaders);
    JsonNode error = trailer.path("error");
    if (!error.isNull() && !error.isMissingNode()) {
      // "DataLossError: ..." / "CorruptRecordError: ...": the Python source's message, in a
      // JDK exception (the driver deserializes a task's failure without the session's jars)
      throw new RuntimeException(error.asText());
    }
    return null;
  }

  /** The reader ended before its trailer: the rows of the split from the byte handed over are
   * not all here, and the task fails saying which (Spark's retry may read it again). */
  private IOException died(IOException e) {
    answered = true;
    PythonReaders.discard(process);
    return new IOException("kafkalog: the Python reader (pid " + process.process.pid() + ") reading " + what
        + " ended before the end of the split, after " + rows + " of its rows (" + process.ending() + "; "
        + (e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage()) + "): the rest of them are not read", e);
  }

  /** A location as messages show it: without a password. */
  static String redacted(String location) {
    return location.replaceFirst("^([A-Za-z][A-Za-z0-9+.\\-]*://)[^/@]*@", "$1***@");
  }

  @Override
  public void close() throws IOException {
    try {
      reader.close();
    } finally {
      // a split left before its end (a LIMIT met, a task cancelled): the reader is still
      // writing its rows, so it is ended rather than handed to another split
      if (!answered) PythonReaders.discard(process);
    }
  }
}
