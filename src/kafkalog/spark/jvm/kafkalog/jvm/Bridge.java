package kafkalog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;

/**
 * The driver's line to kafkalog's Python planner: one persistent {@code python -m
 * kafkalog.spark.jvm_bridge serve} per driver JVM (per interpreter), one JSON request per line,
 * one JSON answer per line. Every plan is the Python source's plan, by construction.
 */
final class Bridge {
  static final ObjectMapper JSON = new ObjectMapper();
  static final Logger LOG = LoggerFactory.getLogger("kafkalog");
  /** the Spark confs {@code kafkalog.spark.register} sets: the interpreter and its path */
  static final String PYTHON_CONF = "spark.kafkalog.python";
  static final String PYTHONPATH_CONF = "spark.kafkalog.pythonpath";
  /** the Unix socket of the planner {@code register} started (kafkalog.spark.jvm_path) */
  static final String PLANNER_CONF = "spark.kafkalog.planner";

  private static Bridge current;
  private final Process process; // null: the planner register() started, on a socket
  private final SocketChannel channel;
  private final BufferedWriter in;
  private final BufferedReader out;
  private final String python;
  /** this planner answered a question: if it ends now it was up and went away (replace it) */
  private boolean answered;

  private Bridge(String python, String pythonPath) throws IOException {
    this.python = python;
    ProcessBuilder pb = new ProcessBuilder(python, "-m", "kafkalog.spark.jvm_bridge", "serve");
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    if (pythonPath != null && !pythonPath.isEmpty()) {
      String old = pb.environment().get("PYTHONPATH");
      pb.environment().put("PYTHONPATH", old == null ? pythonPath : pythonPath + java.io.File.pathSeparator + old);
    }
    process = pb.start();
    channel = null;
    in = new BufferedWriter(new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8));
    out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
  }

  /**
   * The planner {@code kafkalog.spark.register} started in the background (its interpreter
   * started and its imports done while the JVM was busy), on the Unix socket it listens on.
   */
  private Bridge(String python, SocketChannel channel) {
    this.python = python;
    this.process = null;
    this.channel = channel;
    in = new BufferedWriter(new OutputStreamWriter(Channels.newOutputStream(channel), StandardCharsets.UTF_8));
    out = new BufferedReader(new InputStreamReader(Channels.newInputStream(channel), StandardCharsets.UTF_8));
  }

  /** The started planner's socket, or null (none named, or no longer there: start one). */
  static Bridge connect(String python) {
    String socket = conf(PLANNER_CONF);
    if (socket == null || socket.isEmpty()) return null;
    try {
      return new Bridge(python, SocketChannel.open(UnixDomainSocketAddress.of(socket)));
    } catch (IOException | RuntimeException e) {
      LOG.info("kafkalog: the planner started at register() is not there (" + e + "); starting one");
      return null;
    }
  }

  boolean alive() {
    return process != null ? process.isAlive() : channel.isOpen();
  }

  void close() {
    if (process != null) {
      process.destroy();
      return;
    }
    try {
      channel.close();
    } catch (IOException e) {
      // closing a socket the planner may have closed first
    }
  }

  /** The interpreter and PYTHONPATH for kafkalog: the session's confs, else the environment. */
  static String[] pythonOf() {
    String python = null;
    String path = null;
    Option<SparkSession> active = SparkSession.getActiveSession();
    if (active.isEmpty()) active = SparkSession.getDefaultSession();
    if (active.isDefined()) {
      python = active.get().conf().get(PYTHON_CONF, null);
      path = active.get().conf().get(PYTHONPATH_CONF, null);
    }
    if (python == null) python = System.getenv("PYSPARK_PYTHON");
    if (python == null) python = "python3";
    return new String[] {python, path};
  }

  /** A conf of the active session, or null. */
  static String conf(String name) {
    Option<SparkSession> active = SparkSession.getActiveSession();
    if (active.isEmpty()) active = SparkSession.getDefaultSession();
    return active.isDefined() ? active.get().conf().get(name, null) : null;
  }

  static synchronized JsonNode ask(ObjectNode request) {
    return ask(request, true);
  }

  /**
   * Whether a planner that ended (or whose line broke) while asked is replaced and the question
   * asked again: one register() started, or one that had answered before (it was up, then went
   * away: killed, OOM, or killed while the JVM had not yet seen it exit, which under load is a
   * window). A planner this JVM started that ends before its first answer is one that cannot
   * start (kafkalog not importable by that interpreter): said, not retried.
   */
  private boolean replaceable() {
    return process == null || answered;
  }

  /**
   * One question; with {@code retry}, a planner found gone while asked ({@link #replaceable})
   * is replaced and asked again, once.
   */
  private static JsonNode ask(ObjectNode request, boolean retry) {
    String[] py = pythonOf();
    try {
      if (current == null || !current.alive() || !current.python.equals(py[0])) {
        if (current != null) current.close();
        current = connect(py[0]);
        if (current == null) current = new Bridge(py[0], py[1]);
      }
      current.in.write(JSON.writeValueAsString(request));
      current.in.write("\n");
      current.in.flush();
      String line = current.out.readLine();
      if (line == null) {
        boolean replace = current.replaceable();
        current.close();
        current = null;
        if (replace && retry) return ask(request, false);
        throw new IllegalStateException(
            "kafkalog: the planner process (" + py[0] + " -m kafkalog.spark.jvm_bridge) ended; "
                + "is kafkalog installed for that interpreter? (conf " + PYTHON_CONF + ")");
      }
      current.answered = true;
      JsonNode answer = JSON.readTree(line);
      say(answer);
      if (answer.has("error")) {
        String kind = answer.path("kind").asText();
        String message = answer.get("error").asText();
        if (kind.equals("OptionError")) throw new IllegalArgumentException(message);
        throw new KafkalogException(message);
      }
      return answer;
    } catch (IOException e) {
      boolean replace = current != null && current.replaceable();
      if (current != null) current.close();
      current = null;
      if (replace && retry) return ask(request, false);
      throw new IllegalStateException(
          "kafkalog: cannot start or talk to the planner process (" + py[0] + " -m kafkalog.spark.jvm_bridge): "
              + e.getMessage() + "; is kafkalog installed for that interpreter? (conf " + PYTHON_CONF + ")",
          e);
    }
  }

  /** Logs the lines the planner said with an answer (failOnDataLoss=false's warnings). */
  static void say(JsonNode answer) {
    for (JsonNode entry : answer.path("log")) {
      String level = entry.get(0).asText();
      String message = entry.get(1).asText();
      if (level.equals("WARNING") || level.equals("ERROR")) LOG.warn(message);
      else LOG.info(message);
    }
  }

  static ObjectNode request(String op, Map<String, String> options) {
    ObjectNode req = JSON.createObjectNode();
    req.put("op", op);
    ObjectNode opts = req.putObject("options");
    for (Map.Entry<String, String> e : options.entrySet()) opts.put(e.getKey(), e.getValue());
    return req;
  }

  /** A kafkalog error (damage, data loss) raised by the Python planner or reader. */
  static final class KafkalogException extends RuntimeException {
    KafkalogException(String message) {
      super(message);
    }
  }
}
