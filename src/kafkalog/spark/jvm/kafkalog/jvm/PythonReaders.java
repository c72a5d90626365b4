package kafkalog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedInputStream;
import java.io.BufferedReader;
import java.io.DataInputStream;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.sql.SparkSession;
import scala.Option;

/**
 * The Python readers this JVM keeps ({@code python -m kafkalog.spark.jvm_bridge reader}): a
 * process started on a task's first need, serving one split after another, handed back to the
 * pool between splits and taken by the next task or query that needs one; so there are never
 * more than the tasks that ever read through Python at once. A start and kafkalog's imports cost
 * ~0.5 s: paid once per reader, not once per split (a remote store's every split). A reader found
 * dead between splits is replaced; the JVM's end closes their stdin (and a crashed JVM's
 * readers see their parent change), and in a driver the application's end closes them.
 */
final class PythonReaders {
  /** what a trailer may be at most (jvm_bridge bounds its log lines below this) */
  static final int MAX_TRAILER = 8 << 20;

  private static final Map<String, ArrayDeque<Reader>> IDLE = new HashMap<>();
  private static final Set<Reader> ALL = new HashSet<>();
  /** the SparkContext whose end closes the readers (a driver's, in local mode), or null */
  private static SparkContext watched;

  private PythonReaders() {}

  /** One reader process and its pipes. */
  static final class Reader {
    final Process process;
    final String key;
    private final OutputStream in;
    private final DataInputStream out;
    private final Thread stderr;

    private Reader(Process process, String key) {
      this.process = process;
      this.key = key;
      this.in = process.getOutputStream();
      this.out = new DataInputStream(new BufferedInputStream(process.getInputStream(), 1 << 16));
      this.stderr = new Thread(this::drain, "kafkalog-python-reader-stderr-" + process.pid());
      stderr.setDaemon(true);
      stderr.start();
    }

    /** Hands one request (a JSON line) to the reader. */
    void send(byte[] request) throws IOException {
      in.write(request);
      in.write('\n');
      in.flush();
    }

    /** The rows' stream of the request asked: ends at the Arrow stream's end marker, the reader's
     * pipe left open for its trailer and the next request. */
    InputStream rows() {
      return new FilterInputStream(out) {
        @Override
        public void close() {
          // the pipe is the reader's, not this request's
        }
      };
    }

    /** The trailer after a request's rows: its error and log lines (an IOException when the
     * process ended before writing it). */
    JsonNode trailer() throws IOException {
      int n = out.readInt();
      if (n < 0 || n > MAX_TRAILER) throw new IOException("a trailer of " + n + " bytes (at most " + MAX_TRAILER + ")");
      byte[] b = new byte[n];
      out.readFully(b);
      return Bridge.JSON.readTree(b);
    }

    /** How the process ended, said for a message ("exit status 1", "killed by signal 9"), or
     * that it is still running. */
    String ending() {
      try {
        if (!process.waitFor(2, TimeUnit.SECONDS)) return "still running";
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return "unknown";
      }
      int status = process.exitValue();
      return status > 128 ? "killed by signal " + (status - 128) : "exit status " + status;
    }

    private void drain() {
      try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = r.readLine()) != null) say(line);
      } catch (IOException e) {
        // the process is gone
      }
    }
  }

  /** One line the Python reader said (its stderr, or a split's trailer): a warning goes to the
   * kafkalog logger too. */
  static void say(String line) {
    if (line.startsWith("WARNING ")) Bridge.LOG.warn(line.substring("WARNING ".length()));
    System.err.println(line);
  }

  /**
   * A reader for a task to use alone until it hands it back ({@link #give}) or drops it
   * ({@link #discard}): an idle one, else a new one. {@code reuse} false
   * (spark.kafkalog.jvm.reuseReaders=false): a new one, as each split once started its own.
   */
  static Reader take(String python, String pythonPath, boolean reuse) throws IOException {
    String key = python + "\0" + (pythonPath == null ? "" : pythonPath);
    synchronized (PythonReaders.class) {
      ArrayDeque<Reader> idle = IDLE.get(key);
      while (reuse && idle != null && !idle.isEmpty()) {
        Reader r = idle.pollLast(); // the most recently used: its imports and store clients warm
        if (r.process.isAlive()) return r;
        drop(r); // died while idle (killed, out of memory): replaced
      }
    }
    watchApplication();
    ProcessBuilder pb = new ProcessBuilder(python, "-m", "kafkalog.spark.jvm_bridge", "reader");
    if (pythonPath != null && !pythonPath.isEmpty()) {
      String old = pb.environment().get("PYTHONPATH");
      pb.environment().put("PYTHONPATH", old == null ? pythonPath : pythonPath + java.io.File.pathSeparator + old);
    }
    Reader r = new Reader(pb.start(), key);
    synchronized (PythonReaders.class) {
      ALL.add(r);
    }
    return r;
  }

  /** A reader whose last request was answered whole (its trailer read): idle again. */
  static void give(Reader r, boolean reuse) {
    synchronized (PythonReaders.class) {
      if (reuse && ALL.contains(r) && r.process.isAlive()) {
        IDLE.computeIfAbsent(r.key, k -> new ArrayDeque<>()).addLast(r);
        return;
      }
    }
    discard(r);
  }

  /** A reader in no known state (a split left unread, a pipe broken): ended, never reused. */
  static void discard(Reader r) {
    synchronized (PythonReaders.class) {
      ALL.remove(r);
    }
    end(r);
  }

  private static void drop(Reader r) {
    ALL.remove(r);
    end(r);
  }

  private static void end(Reader r) {
    try {
      r.in.close(); // its signal to end
    } catch (IOException e) {
      // already gone
    }
    r.process.destroy();
  }

  /** Ends every reader (the application ended), and waits a little for them to be gone. */
  static void closeAll() {
    Reader[] all;
    synchronized (PythonReaders.class) {
      all = ALL.toArray(new Reader[0]);
      ALL.clear();
      IDLE.clear();
    }
    for (Reader r : all) end(r);
    for (Reader r : all) {
      try {
        if (!r.process.waitFor(5, TimeUnit.SECONDS)) r.process.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  /**
   * In a driver (local mode: its tasks run here), the readers end with the application
   * ({@code SparkSession.stop()}), though the JVM may live on (PySpark keeps it for a next
   * session). An executor JVM ends with its application: its readers' stdin closes then.
   */
  private static void watchApplication() {
    Option<SparkSession> session = SparkSession.getActiveSession();
    if (session.isEmpty()) session = SparkSession.getDefaultSession();
    if (session.isEmpty()) return;
    SparkContext sc = session.get().sparkContext();
    synchronized (PythonReaders.class) {
      if (sc == watched || sc.isStopped()) return;
      watched = sc;
    }
    sc.addSparkListener(new SparkListener() {
      @Override
      public void onApplicationEnd(SparkListenerApplicationEnd end) {
        closeAll();
      }
    });
  }
}
