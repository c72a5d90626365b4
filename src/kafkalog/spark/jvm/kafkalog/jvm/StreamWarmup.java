package kafkalog.jvm;

import java.util.Collections;
import java.util.List;
import org.apache.spark.SparkContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.Function;
import org.apache.spark.sql.SparkSession;
import scala.Option;

/**
 * The warm-up by default ({@code spark.kafkalog.jvm.warmup=stream}, or unset): when a stream's
 * scan starts ({@code toMicroBatchStream}, on the stream's own thread, after {@code start()}
 * returned), {@link FirstTask}'s one-row job runs on a daemon thread of its own, once per local
 * application, beside the stream's first micro-batch.
 *
 * <p>Why there: a new process's first micro-batch pays, one after the other on its stream
 * thread, the offsets, the offset log, Spark's planning and code generation, and only then
 * Spark's first job, the executor's fetch of the {@code ADD JAR}'d jar, its class loader and our
 * decoder run cold; the stream thread leaves the other core idle until its job starts. This job
 * pays those on the other core meanwhile, so the stream's job finds them paid. Started any earlier (inside or after {@code register()}: the
 * {@code true} and {@code background} settings) it competed with {@code register()},
 * {@code load()} and {@code start()} on 2 cores; here every one of them has returned.
 *
 * <p>Only local sessions (elsewhere executors are other JVMs that one task would not all
 * reach); it reads nothing of the user's and changes how soon, never what, a micro-batch
 * answers; a failure is only logged. The job carries the stream's job group (the query's run
 * id, so stopping the query cancels it) with a description of its own.
 */
public final class StreamWarmup {
  static final String CONF = "spark.kafkalog.jvm.warmup";
  static final String DESCRIPTION = "kafkalog: the JVM source's first task (warm-up at a stream's start)";
  /**
   * JVM system properties (one JVM, one application at a time, whatever copy of this jar's
   * classes asks: the driver's, the executor's, another {@code ADD JAR}'s): the application
   * whose warm-up started, and what it did: {@code running}, {@code done <ms> (<FirstTask's
   * answer>)} or {@code failed: ...} (tests and benchmarks read it with {@code
   * java_method('java.lang.System', 'getProperty', ...)}).
   */
  static final String APPLICATION_PROPERTY = "kafkalog.jvm.warmup.stream.application";
  static final String STATE_PROPERTY = "kafkalog.jvm.warmup.stream.state";

  private StreamWarmup() {}

  /** Called as a stream's scan starts: the warm-up's thread, when this session wants it and
   * this application has not had it; null otherwise. */
  static Thread atStreamStart() {
    try {
      Option<SparkSession> active = SparkSession.getActiveSession();
      if (active.isEmpty()) return null;
      SparkSession session = active.get();
      String mode = session.conf().get(CONF, "stream").trim().toLowerCase(java.util.Locale.ROOT);
      if (!mode.equals("stream")) return null; // false: never; true, background: register() ran it
      SparkContext context = session.sparkContext();
      if (!context.isLocal() || !claim(context.applicationId())) return null;
      System.setProperty(STATE_PROPERTY, "running");
      Thread thread = new Thread(() -> run(session), "kafkalog-first-task");
      thread.setDaemon(true);
      // the job's closure is this jar's class: serialized through the loader that loaded it
      // (ADD JAR gives the jar to the calling thread's loader only)
      thread.setContextClassLoader(StreamWarmup.class.getClassLoader());
      thread.start();
      return thread;
    } catch (RuntimeException e) {
      Bridge.LOG.debug("kafkalog: no warm-up at the stream's start (" + e + ")");
      return null;
    }
  }

  /** Whether this caller starts {@code application}'s warm-up (the first to ask). */
  private static boolean claim(String application) {
    java.util.Properties all = System.getProperties();
    synchronized (all) {
      if (application.equals(all.getProperty(APPLICATION_PROPERTY))) return false;
      all.setProperty(APPLICATION_PROPERTY, application);
      return true;
    }
  }

  private static void run(SparkSession session) {
    long t0 = System.nanoTime();
    try {
      SparkContext context = session.sparkContext();
      context.setJobDescription(DESCRIPTION);
      // Spark's core API, not SQL: the job reaches the executor at once (a SQL job's analysis
      // and code generation took as long as the stream's own, and its job came second)
      List<String> done = JavaSparkContext.fromSparkContext(context)
          .parallelize(Collections.singletonList(0), 1)
          .map(new Task())
          .collect();
      String state = "done " + (System.nanoTime() - t0) / 1_000_000 + " (" + done.get(0) + ")";
      System.setProperty(STATE_PROPERTY, state);
      Bridge.LOG.info("kafkalog: the JVM source's first task at the stream's start: " + state);
    } catch (Exception | LinkageError e) { // only how soon a first micro-batch answers
      String first = String.valueOf(e.getMessage()).split("\n", 2)[0];
      System.setProperty(STATE_PROPERTY, "failed: " + first);
      Bridge.LOG.debug("kafkalog: the JVM source's first task at the stream's start failed", e);
    }
  }

  /** The task: {@link FirstTask#run} in the executor, with the executor's copy of the jar. */
  static final class Task implements Function<Integer, String> {
    private static final long serialVersionUID = 1L;

    @Override
    public String call(Integer ignored) throws java.io.IOException {
      return FirstTask.run();
    }
  }
}
