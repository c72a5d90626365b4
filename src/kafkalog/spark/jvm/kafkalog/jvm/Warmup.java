package kafkalog.jvm;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;
import java.util.zip.GZIPOutputStream;
import net.jpountz.lz4.LZ4Compressor;
import net.jpountz.lz4.LZ4Factory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.xerial.snappy.Snappy;
import scala.Option;

/**
 * What a new driver's first query or micro-batch would otherwise run cold, run once in the
 * background: Spark's code generator (Janino: a signed jar whose classes are each verified as
 * they load, then its parser and compiler interpreted: ~0.5 s of a first micro-batch here),
 * Spark's block codec (lz4-java, its native library loaded), the Kafka codecs (snappy, lz4 and
 * zstd load native libraries on first use), and the Java decoder over a small synthetic
 * segment (every entry kind it reads, every column Spark reads from it).
 *
 * <p>All of that is shared by the whole JVM except the decoder's own classes: a jar added with
 * {@code ADD JAR} (what {@code register} does) is fetched by the executor and loaded by the
 * executor's own class loader, even in local mode, so the JIT's work on the driver's copy serves
 * only the driver's decoding (local counts, {@link Counts#onDriver}). With the jar in {@code
 * spark.jars} from the session's start, driver and executor share one copy, and the warm-up
 * starts inside {@code register} (its Python source's registration looks the name up).
 *
 * <p>Local mode only (elsewhere the executors are other JVMs), and only when conf {@link #CONF}
 * is {@code true}: on this project's shared 2-core machine (load average 4-13) it made no first
 * micro-batch sooner after an {@code ADD JAR} and made {@code load()} and {@code start()}
 * slower (it competes for the cores with them from inside {@code load()}); bench/RESULTS.md, "A
 * background warm-up of the JVM".
 *
 * <p>Started by the source's first instantiation (Spark's look-up of a {@code format(...)}),
 * once per JVM. It runs no Spark job, reads nothing of the user's (its own temporary file,
 * deleted when done), never starts the Python reader ({@code fallback} off), and its errors are
 * only logged: it changes how soon, never what, a query answers. Its state is left in the
 * session's conf {@link #STATE_CONF} ({@code running}, {@code done <ms> (<parts>)}, {@code
 * failed: ...}, {@code off}).
 */
public final class Warmup {
  static final String CONF = "spark.kafkalog.jvm.warmup";
  static final String STATE_CONF = "spark.kafkalog.jvm.warmup.state";
  /** tests: a file the warm-up waits for (at most a minute) after its first round */
  static final String GATE_CONF = "spark.kafkalog.jvm.warmup.gate";

  /** rounds over the synthetic segment (each all columns, then a count): the JIT's first tiers for
   * the driver's decoding (local counts); a task has its own copy of the classes */
  static final int ROUNDS = 3;
  private static final String[] ALL = {"key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"};

  private static boolean started;

  private Warmup() {}

  /** Start the warm-up unless it has started in this JVM, is not turned on, or the session is not
   * local (an executor elsewhere would not profit from the driver's JIT). Never blocks. */
  static synchronized void startOnce() {
    if (started) return;
    Option<SparkSession> active = SparkSession.getActiveSession();
    if (active.isEmpty()) active = SparkSession.getDefaultSession();
    if (active.isEmpty()) return; // no session to read the conf of: the next look-up may
    SparkSession session = active.get();
    started = true;
    if (!"true".equalsIgnoreCase(session.conf().get(CONF, "false")) || !session.sparkContext().isLocal()) {
      setState(session, "off");
      return;
    }
    String gate = session.conf().get(GATE_CONF, "");
    setState(session, "running");
    Thread t = new Thread(() -> run(session, gate), "kafkalog-jvm-warmup");
    t.setDaemon(true);
    t.setPriority(Thread.MIN_PRIORITY);
    t.start();
  }

  private static void setState(SparkSession session, String state) {
    try {
      session.conf().set(STATE_CONF, state);
    } catch (RuntimeException e) {
      // a session stopped meanwhile: nobody to tell
    }
  }

  private static void run(SparkSession session, String gate) {
    long t0 = System.nanoTime();
    java.lang.management.ThreadMXBean cpu = java.lang.management.ManagementFactory.getThreadMXBean();
    long c0 = cpu.getCurrentThreadCpuTime();
    Path file = null;
    String state;
    try {
      codegen(); // first: a query's code is generated before its first task runs
      long t1 = System.nanoTime();
      blockCodec();
      long t2 = System.nanoTime();
      byte[] segment = segment(); // the codecs' classes and native libraries loaded
      long t3 = System.nanoTime();
      file = Files.createTempFile("kafkalog-warmup-", ".log");
      file.toFile().deleteOnExit();
      Files.write(file, segment);
      long held = 0;
      for (int round = 0; round < ROUNDS; round++) {
        decode(file, segment.length, ALL, true);
        decode(file, segment.length, new String[0], false);
        if (round == 0 && !gate.isEmpty()) {
          long h = System.nanoTime();
          waitFor(Path.of(gate));
          held = System.nanoTime() - h;
        }
      }
      long t4 = System.nanoTime();
      state = "done " + ms(t4 - t0 - held) + " (codegen " + ms(t1 - t0) + ", block codec " + ms(t2 - t1)
          + ", codecs " + ms(t3 - t2) + ", decoder " + ms(t4 - t3 - held) + "; cpu "
          + ms(cpu.getCurrentThreadCpuTime() - c0) + ")";
      Bridge.LOG.debug("kafkalog: the Java decoder warmed up in " + (System.nanoTime() - t0) / 1_000_000 + " ms");
    } catch (Throwable e) {
      state = "failed: " + e;
      Bridge.LOG.debug("kafkalog: the Java decoder's warm-up failed (" + e + "); the first task runs it cold");
    } finally {
      if (file != null) {
        try {
          Files.deleteIfExists(file);
        } catch (IOException e) {
          Bridge.LOG.debug("kafkalog: the warm-up's file " + file + " stays (" + e + ")");
        }
      }
    }
    setState(session, state);
  }

  /**
   * Spark's code generator, as its first query uses it: Janino (a signed jar, every class
   * verified as it loads; then its parser and compiler interpreted), driven through its public
   * API by reflection, so a Spark without it only skips this.
   */
  static void codegen() {
    try {
      Class<?> evaluator = Class.forName("org.codehaus.janino.ClassBodyEvaluator");
      for (int i = 0; i < 4; i++) {
        Object e = evaluator.getConstructor().newInstance();
        evaluator.getMethod("setClassName", String.class).invoke(e, "kafkalog.jvm.WarmupGenerated" + i);
        evaluator.getMethod("cook", String.class).invoke(e, GENERATED);
      }
    } catch (ReflectiveOperationException | LinkageError | RuntimeException e) {
      Bridge.LOG.debug("kafkalog: no code generator warm-up (" + e + ")");
    }
  }

  /** Spark's block codec (lz4-java's block streams, as its broadcast of each job's tasks uses
   * them by default): its classes and native library loaded. */
  static void blockCodec() {
    try {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      try (java.io.OutputStream out = new net.jpountz.lz4.LZ4BlockOutputStream(bytes, 32 << 10,
          LZ4Factory.fastestInstance().fastCompressor(),
          net.jpountz.xxhash.XXHashFactory.fastestInstance().newStreamingHash32(0x9747b28c).asChecksum(), false)) {
        out.write(new byte[100_000]);
      }
      try (java.io.InputStream in = new net.jpountz.lz4.LZ4BlockInputStream(new java.io.ByteArrayInputStream(bytes.toByteArray()))) {
        in.readAllBytes();
      }
    } catch (IOException | LinkageError | RuntimeException e) {
      Bridge.LOG.debug("kafkalog: no block codec warm-up (" + e + ")");
    }
  }

  /** A class body of the shape Spark generates: state, a loop over rows, null checks, nested
   * calls, a switch, an inner class. */
  private static final String GENERATED = String.join("\n",
      "private long[] values = new long[64];",
      "private byte[][] bytes = new byte[64][];",
      "private boolean[] nulls = new boolean[64];",
      "private int count;",
      "public long run(int rows) {",
      "  long sum = 0L;",
      "  for (int i = 0; i < rows; i++) {",
      "    int r = i % values.length;",
      "    if (nulls[r]) { continue; }",
      "    long v = values[r] * 31L + (bytes[r] == null ? -1 : bytes[r].length);",
      "    switch ((int) (v & 3L)) {",
      "      case 0: sum += v; break;",
      "      case 1: sum -= v; break;",
      "      default: sum ^= helper(v, r);",
      "    }",
      "    count++;",
      "  }",
      "  return sum;",
      "}",
      "private long helper(long v, int r) {",
      "  final Row row = new Row(v, r);",
      "  return row.mix() + java.lang.Math.max(v, (long) r) + String.valueOf(r).length();",
      "}",
      "private static final class Row {",
      "  private final long v;",
      "  private final int r;",
      "  Row(long v, int r) { this.v = v; this.r = r; }",
      "  long mix() { return (v << 7) ^ (long) r; }",
      "}");

  private static long ms(long nanos) {
    return nanos / 1_000_000;
  }

  private static void waitFor(Path gate) throws InterruptedException {
    for (int i = 0; i < 600 && !Files.exists(gate); i++) Thread.sleep(100);
  }

  /** One task's reader over the whole file, every batch's rows read as Spark reads them. */
  private static void decode(Path file, long size, String[] columns, boolean headers) throws IOException {
    ObjectNode task = Bridge.JSON.createObjectNode();
    ObjectNode s = task.putArray("splits").addObject();
    s.put("topic", "warmup");
    s.put("partition", 0);
    s.put("directory", file.getParent().toString());
    s.put("segment", file.toString());
    s.put("base_offset", 0L);
    s.put("start_position", 0L);
    s.put("end_position", size);
    s.put("start_offset", 0L);
    s.put("end_offset", Long.MAX_VALUE);
    s.put("planned_size", size);
    s.putNull("identity");
    s.put("last_segment", true);
    task.putObject("aborted");
    TaskPlan plan = TaskPlan.of(task, headers, columns, null, null, "", "");
    plan.fallback = false; // never the Python reader: anything unexpected is an error, logged
    SplitReader reader = new SplitReader(plan);
    try {
      long sink = 0;
      while (reader.next()) sink += consume(reader.get(), columns);
      if (sink == 42) Bridge.LOG.trace("kafkalog: warm-up checksum " + sink); // keeps the reads live
    } finally {
      reader.close();
    }
  }

  /** Every value of every column, through the accessors Spark's generated code calls. */
  private static long consume(ColumnarBatch b, String[] columns) {
    long sink = b.numRows();
    for (int c = 0; c < columns.length; c++) {
      ColumnVector v = b.column(c);
      for (int r = 0; r < b.numRows(); r++) {
        if (v.isNullAt(r)) continue;
        switch (columns[c]) {
          case "key":
          case "value": sink += v.getBinary(r).length; break;
          case "topic": sink += v.getUTF8String(r).numBytes(); break;
          case "partition":
          case "timestampType": sink += v.getInt(r); break;
          case "headers": {
            ColumnarArray a = v.getArray(r);
            for (int h = 0; h < a.numElements(); h++) {
              sink += a.getStruct(h, 2).getUTF8String(0).numBytes();
              byte[] hv = a.getStruct(h, 2).getBinary(1);
              if (hv != null) sink += hv.length;
            }
            break;
          }
          default: sink += v.getLong(r);
        }
      }
    }
    return sink;
  }

  // ---- the synthetic segment: what real writers leave, each of the decoder's paths ----------

  /** v2 batches (uncompressed, the four codecs, snappy framed and raw, one transactional, one
   * control marker), then v1 and v0 message sets (plain and a gzip wrapper). */
  static byte[] segment() throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    long offset = 0;
    long ts = 1_700_000_000_000L;
    int[] codecs = {0, 0, 0, 0, 0, 1, 0, 2, 0, 2, 0, 3, 0, 4, 0, 5, 6};
    for (int i = 0; i < codecs.length; i++) {
      int n = codecs[i] == 0 ? 400 : codecs[i] == 6 ? 1 : 100;
      out.write(v2(offset, ts + offset, n, codecs[i], i));
      offset += n;
    }
    for (int magic = 1; magic >= 0; magic--) {
      for (int i = 0; i < 50; i++) out.write(message(offset++, magic, 0, ts + offset, key(i), value(i, 40)));
      ByteArrayOutputStream inner = new ByteArrayOutputStream();
      for (int i = 0; i < 20; i++) inner.write(message(magic == 1 ? i : offset + i, magic, 0, ts + offset, key(i), value(i, 30)));
      offset += 20;
      out.write(message(offset - 1, magic, 1, ts + offset, null, gzip(inner.toByteArray())));
    }
    return out.toByteArray();
  }

  private static byte[] key(int i) {
    return i % 5 == 0 ? null : ("user-" + (i % 97)).getBytes(java.nio.charset.StandardCharsets.US_ASCII);
  }

  private static byte[] value(int i, int size) {
    byte[] v = new byte[size + i % 150]; // one- and two-byte length varints
    for (int k = 0; k < v.length; k++) v[k] = (byte) ('a' + (i + k) % 26);
    return v;
  }

  /** codec 5: uncompressed, transactional, with headers on every record; 6: its commit marker */
  private static byte[] v2(long base, long baseTs, int n, int codec, int salt) throws IOException {
    ByteArrayOutputStream recs = new ByteArrayOutputStream();
    for (int k = 0; k < n; k++) {
      ByteArrayOutputStream r = new ByteArrayOutputStream();
      r.write(0);
      varlong(r, k * 3L);
      varlong(r, k);
      bytes(r, codec == 6 ? new byte[] {0, 0, 0, 1} : key(k + salt));
      bytes(r, codec == 6 ? new byte[6] : value(k + salt, 20));
      int headers = codec == 6 ? 0 : codec == 5 || k % 7 == 0 ? 1 + k % 3 : 0;
      varlong(r, headers);
      for (int h = 0; h < headers; h++) {
        bytes(r, ("h" + h).getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        bytes(r, h == 2 ? null : new byte[] {(byte) k, (byte) h});
      }
      varlong(recs, r.size());
      r.writeTo(recs);
    }
    byte[] payload = recs.toByteArray();
    int attrs = 0;
    switch (codec) {
      case 1: payload = gzip(payload); attrs = 1; break;
      case 2: payload = salt % 2 == 0 ? Snappy.compress(payload) : xerial(payload); attrs = 2; break;
      case 3: payload = lz4(payload); attrs = 3; break;
      case 4: payload = com.github.luben.zstd.Zstd.compress(payload); attrs = 4; break;
      case 5: attrs = 0x10; break;
      case 6: attrs = 0x30; break;
      default: break;
    }
    ByteBuffer b = ByteBuffer.allocate(61 + payload.length);
    b.putLong(base).putInt(49 + payload.length).putInt(0).put((byte) 2).putInt(0);
    b.putShort((short) attrs).putInt(n - 1).putLong(baseTs).putLong(baseTs + (n - 1) * 3L);
    boolean txn = codec >= 5;
    b.putLong(txn ? 7 : -1).putShort((short) (txn ? 0 : -1)).putInt(codec == 5 ? 0 : -1).putInt(n);
    b.put(payload);
    byte[] a = b.array();
    CRC32C crc = new CRC32C();
    crc.update(a, 21, a.length - 21);
    ByteBuffer.wrap(a).putInt(17, (int) crc.getValue());
    return a;
  }

  private static byte[] message(long offset, int magic, int codec, long ts, byte[] key, byte[] value) {
    int size = (magic == 1 ? 14 : 6) + 4 + (key == null ? 0 : key.length) + 4 + value.length;
    ByteBuffer b = ByteBuffer.allocate(12 + size);
    b.putLong(offset).putInt(size).putInt(0).put((byte) magic).put((byte) codec);
    if (magic == 1) b.putLong(ts);
    b.putInt(key == null ? -1 : key.length);
    if (key != null) b.put(key);
    b.putInt(value.length).put(value);
    byte[] a = b.array();
    CRC32 crc = new CRC32();
    crc.update(a, 16, a.length - 16);
    ByteBuffer.wrap(a).putInt(12, (int) crc.getValue());
    return a;
  }

  private static void bytes(ByteArrayOutputStream out, byte[] b) {
    if (b == null) {
      varlong(out, -1);
      return;
    }
    varlong(out, b.length);
    out.write(b, 0, b.length);
  }

  private static void varlong(ByteArrayOutputStream out, long v) {
    long z = (v << 1) ^ (v >> 63);
    while ((z & ~0x7fL) != 0) {
      out.write((int) ((z & 0x7f) | 0x80));
      z >>>= 7;
    }
    out.write((int) z);
  }

  private static byte[] gzip(byte[] in) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (GZIPOutputStream g = new GZIPOutputStream(out)) {
      g.write(in);
    }
    return out.toByteArray();
  }

  /** xerial's framing, as Kafka's Java producer writes snappy: a header, then sized blocks. */
  private static byte[] xerial(byte[] in) throws IOException {
    ByteBuffer head = ByteBuffer.allocate(16);
    head.put(new byte[] {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}).putInt(1).putInt(1);
    byte[] block = Snappy.compress(in);
    ByteBuffer b = ByteBuffer.allocate(16 + 4 + block.length);
    b.put(head.array()).putInt(block.length).put(block);
    return b.array();
  }

  /** Kafka's LZ4 frame: magic, FLG (version 1, independent blocks), BD (64 KiB), one block. */
  private static byte[] lz4(byte[] in) {
    LZ4Compressor c = LZ4Factory.fastestInstance().fastCompressor();
    byte[] block = c.compress(in);
    ByteBuffer b = ByteBuffer.allocate(7 + 4 + block.length + 4).order(java.nio.ByteOrder.LITTLE_ENDIAN);
    b.putInt(0x184D2204).put((byte) 0x60).put((byte) 0x40).put((byte) 0);
    b.putInt(block.length).put(block).putInt(0);
    return b.array();
  }
}
