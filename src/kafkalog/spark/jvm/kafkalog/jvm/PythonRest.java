package kafkalog.jvm;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The rest of a split read by kafkalog's Python reader ({@code python -m kafkalog.spark.jvm_bridge
 * read -}), its rows streamed back as Arrow IPC: damaged bytes fail with the Python source's
 * error naming file and byte, or with failOnDataLoss=false are skipped with its warning.
 */
final class PythonRest implements AutoCloseable {
  private static final BufferAllocator ALLOCATOR = new RootAllocator(Long.MAX_VALUE);

  private final TaskPlan plan;
  private final Process process;
  private final ArrowStreamReader reader;
  private final StringBuilder error = new StringBuilder();
  private final Thread stderr;

  private PythonRest(TaskPlan plan, Process process) {
    this.plan = plan;
    this.process = process;
    this.reader = new ArrowStreamReader(process.getInputStream(), ALLOCATOR);
    this.stderr = new Thread(this::drain, "kafkalog-python-reader-stderr");
    stderr.setDaemon(true);
    stderr.start();
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
    ArrayNode aborted = req.putArray("aborted");
    long[][] ranges = plan.aborted.get(split.directory);
    if (ranges != null) {
      for (long[] r : ranges) aborted.addArray().add(r[0]).add(r[1]).add(r[2]);
    }
    ProcessBuilder pb = new ProcessBuilder(plan.python, "-m", "kafkalog.spark.jvm_bridge", "read", "-");
    if (plan.pythonPath != null && !plan.pythonPath.isEmpty()) {
      String old = pb.environment().get("PYTHONPATH");
      pb.environment().put("PYTHONPATH", old == null ? plan.pythonPath : plan.pythonPath + java.io.File.pathSeparator + old);
    }
    Process process = pb.start();
    try (OutputStream in = process.getOutputStream()) {
      in.write(Bridge.JSON.writeValueAsBytes(req));
    }
    return new PythonRest(plan, process);
  }

  private void drain() {
    try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
      String line;
      while ((line = r.readLine()) != null) {
        if (line.startsWith("KAFKALOG-ERROR ")) {
          synchronized (error) {
            error.append(line.substring("KAFKALOG-ERROR ".length()));
          }
        } else if (line.startsWith("WARNING ")) {
          Bridge.LOG.warn(line.substring("WARNING ".length()));
          System.err.println(line);
        } else {
          System.err.println(line);
        }
      }
    } catch (IOException e) {
      // the process is gone: its exit status says what happened
    }
  }

  /** The next batch of rows, or null at the end (a failure of the Python reader is thrown). */
  ColumnarBatch next() throws IOException {
    while (reader.loadNextBatch()) {
      VectorSchemaRoot root = reader.getVectorSchemaRoot();
      if (root.getRowCount() == 0) continue;
      ColumnVector[] cols = new ColumnVector[plan.sources.length];
      for (int i = 0; i < cols.length; i++) cols[i] = new ArrowColumnVector(root.getVector(plan.sources[i]));
      return new ColumnarBatch(cols, root.getRowCount());
    }
    int status;
    try {
      status = process.waitFor();
      stderr.join(10_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("kafkalog: interrupted", e);
    }
    if (status != 0) {
      String message;
      synchronized (error) {
        message = error.length() > 0 ? error.toString() : "kafkalog: the Python reader failed with exit status " + status;
      }
      // "DataLossError: ..." / "CorruptRecordError: ...": the Python source's message, in a
      // JDK exception (the driver deserializes a task's failure without the session's jars)
      throw new RuntimeException(message);
    }
    return null;
  }

  @Override
  public void close() throws IOException {
    try {
      reader.close();
    } finally {
      process.destroy();
    }
  }
}
