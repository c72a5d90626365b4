package kafkalog.jvm;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.zip.CRC32C;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The decoder's first run in the JVM class loader that calls it: what {@link StreamWarmup} (when a
 * stream starts, by default) or {@code kafkalog.spark.register} ({@code spark.kafkalog.jvm.warmup}
 * {@code true} or {@code background}, through {@code reflect}) runs in the executor (local mode)
 * through one task of Spark's own, so that a
 * new process's first query or micro-batch finds the executor's copy of this jar fetched, its
 * classes loaded and verified, and the reader's code run once. A jar added with {@code ADD JAR}
 * is loaded by the executor through a class loader of its own, even in local mode: nothing the
 * driver loaded serves a task.
 *
 * <p>It reads a small segment of its own (uncompressed v2 batches, with headers, a
 * transactional one and its commit marker; written to a temporary file, deleted when done)
 * with every column, never starts the Python reader, loads no codec (a split loads the codec
 * it meets, when it meets it), keeps no batch summaries, and reads nothing of the user's.
 */
public final class FirstTask {
  private static final String[] ALL = {"key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"};
  private static boolean ran;

  private FirstTask() {}

  /** Once per class loader: the decoder run over the small segment; what it did, for the log. */
  public static synchronized String run() throws java.io.IOException {
    if (ran) return "already";
    ran = true;
    long t0 = System.nanoTime();
    byte[] segment = segment();
    Path file = Files.createTempFile("kafkalog-first-task-", ".log");
    long rows;
    try {
      Files.write(file, segment);
      TaskPlan plan = TaskPlan.ofFile(file, segment.length, ALL);
      rows = decode(plan);
      // what a split keeping batch summaries loads, unused here (no identity)
      Class.forName("kafkalog.jvm.BatchSummaries$Learned");
    } catch (ClassNotFoundException e) {
      throw new IllegalStateException(e);
    } finally {
      Files.deleteIfExists(file);
    }
    return "read " + rows + " rows in " + (System.nanoTime() - t0) / 1_000_000 + " ms";
  }

  private static long decode(TaskPlan plan) throws java.io.IOException {
    SplitReader reader = new SplitReader(plan);
    long rows = 0;
    try {
      while (reader.next()) rows += consume(reader.get());
    } finally {
      reader.close();
    }
    return rows;
  }

  /** Every value of every column, through the accessors Spark's generated code calls. */
  private static long consume(ColumnarBatch b) {
    long sink = 0;
    for (int c = 0; c < ALL.length; c++) {
      ColumnVector v = b.column(c);
      for (int r = 0; r < b.numRows(); r++) {
        if (v.isNullAt(r)) continue;
        switch (ALL[c]) {
          case "key":
          case "value": sink += v.getBinary(r).length; break;
          case "topic": sink += v.getUTF8String(r).numBytes(); break;
          case "partition":
          case "timestampType": sink += v.getInt(r); break;
          case "headers": {
            ColumnarArray a = v.getArray(r);
            for (int h = 0; h < a.numElements(); h++) sink += a.getStruct(h, 2).getUTF8String(0).numBytes();
            break;
          }
          default: sink += v.getLong(r);
        }
      }
    }
    return sink == Long.MIN_VALUE ? 0 : b.numRows(); // the reads stay live
  }

  /** Uncompressed v2 batches, some records with headers; a transactional batch, its marker. */
  static byte[] segment() throws java.io.IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    long offset = 0;
    long ts = 1_700_000_000_000L;
    int[] kinds = {0, 0, 0, 0, 1, 2, 0, 0};
    for (int i = 0; i < kinds.length; i++) {
      int n = kinds[i] == 2 ? 1 : 200;
      out.write(v2(offset, ts + offset, n, kinds[i], i));
      offset += n;
    }
    return out.toByteArray();
  }

  private static byte[] bytesOf(int i, int size) {
    byte[] v = new byte[size + i % 150]; // one- and two-byte length varints
    for (int k = 0; k < v.length; k++) v[k] = (byte) ('a' + (i + k) % 26);
    return v;
  }

  /** kind 1: transactional, a header on every record; 2: its commit marker */
  private static byte[] v2(long base, long baseTs, int n, int kind, int salt) throws java.io.IOException {
    ByteArrayOutputStream recs = new ByteArrayOutputStream();
    for (int k = 0; k < n; k++) {
      ByteArrayOutputStream r = new ByteArrayOutputStream();
      r.write(0);
      varlong(r, k * 3L);
      varlong(r, k);
      bytes(r, kind == 2 ? new byte[] {0, 0, 0, 1} : (k + salt) % 5 == 0 ? null : bytesOf(k, 6));
      bytes(r, kind == 2 ? new byte[6] : bytesOf(k + salt, 20));
      int headers = kind == 2 ? 0 : kind == 1 || k % 7 == 0 ? 1 + k % 3 : 0;
      varlong(r, headers);
      for (int h = 0; h < headers; h++) {
        bytes(r, ("h" + h).getBytes(StandardCharsets.US_ASCII));
        bytes(r, h == 2 ? null : new byte[] {(byte) k, (byte) h});
      }
      varlong(recs, r.size());
      r.writeTo(recs);
    }
    byte[] payload = recs.toByteArray();
    int attrs = kind == 1 ? 0x10 : kind == 2 ? 0x30 : 0;
    ByteBuffer b = ByteBuffer.allocate(61 + payload.length);
    b.putLong(base).putInt(49 + payload.length).putInt(0).put((byte) 2).putInt(0);
    b.putShort((short) attrs).putInt(n - 1).putLong(baseTs).putLong(baseTs + (n - 1) * 3L);
    boolean txn = kind != 0;
    b.putLong(txn ? 7 : -1).putShort((short) (txn ? 0 : -1)).putInt(kind == 1 ? 0 : -1).putInt(n);
    b.put(payload);
    byte[] a = b.array();
    CRC32C crc = new CRC32C();
    crc.update(a, 21, a.length - 21);
    ByteBuffer.wrap(a).putInt(17, (int) crc.getValue());
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
}
