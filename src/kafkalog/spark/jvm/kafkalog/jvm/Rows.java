package kafkalog.jvm;

import java.util.Arrays;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** The rows of one ColumnarBatch as the decoder collects them: only the columns asked for. */
final class Rows {
  final boolean key;
  final boolean value;
  final boolean timestamp;
  final boolean timestampType;
  final boolean headers;
  final boolean offset;
  /** some column needs each record's fields (else rows are counted from batch headers) */
  final boolean perRow;

  int n;
  long[] offsets = new long[1024];
  long[] ts;
  int[] tsType;
  byte[][] keyBase;
  int[] keyOff;
  int[] keyLen;
  byte[][] valBase;
  int[] valOff;
  int[] valLen;
  int[] hStart;
  /** a record without headers (every v0/v1 message): null, not an empty array (as the Python
   * reader gives it) */
  boolean[] hNull;
  int hn;
  byte[][] hkBase;
  int[] hkOff;
  int[] hkLen;
  byte[][] hvBase;
  int[] hvOff;
  int[] hvLen;

  Rows(TaskPlan plan) {
    key = plan.wants("key");
    value = plan.wants("value");
    timestamp = plan.wants("timestamp");
    timestampType = plan.wants("timestampType");
    headers = plan.wants("headers");
    offset = plan.wants("offset");
    perRow = key || value || timestamp || timestampType || headers || offset;
    int c = offsets.length;
    if (timestamp) ts = new long[c];
    if (timestampType) tsType = new int[c];
    if (key) {
      keyBase = new byte[c][];
      keyOff = new int[c];
      keyLen = new int[c];
    }
    if (value) {
      valBase = new byte[c][];
      valOff = new int[c];
      valLen = new int[c];
    }
    if (headers) {
      hStart = new int[c + 1];
      hNull = new boolean[c];
      hkBase = new byte[64][];
      hkOff = new int[64];
      hkLen = new int[64];
      hvBase = new byte[64][];
      hvOff = new int[64];
      hvLen = new int[64];
    }
  }

  /** Empty again, its arrays kept (the batch built from them before is Spark's no longer). */
  void reset() {
    n = 0;
    hn = 0;
  }

  /** Room for one more row at index n (the caller fills it, then calls {@link #commit}). */
  void room() {
    if (n < offsets.length) return;
    ensure(n + 1);
  }

  /** Room for rows up to index want - 1. */
  void ensure(int want) {
    if (want <= offsets.length) return;
    int c = Math.max(want, offsets.length * 2);
    offsets = Arrays.copyOf(offsets, c);
    if (timestamp) ts = Arrays.copyOf(ts, c);
    if (timestampType) tsType = Arrays.copyOf(tsType, c);
    if (key) {
      keyBase = Arrays.copyOf(keyBase, c);
      keyOff = Arrays.copyOf(keyOff, c);
      keyLen = Arrays.copyOf(keyLen, c);
    }
    if (value) {
      valBase = Arrays.copyOf(valBase, c);
      valOff = Arrays.copyOf(valOff, c);
      valLen = Arrays.copyOf(valLen, c);
    }
    if (headers) {
      hStart = Arrays.copyOf(hStart, c + 1);
      hNull = Arrays.copyOf(hNull, c);
    }
  }

  void header(byte[] b, int kOff, int kLen, int vOff, int vLen) {
    if (hn == hkOff.length) {
      int c = hn * 2;
      hkBase = Arrays.copyOf(hkBase, c);
      hkOff = Arrays.copyOf(hkOff, c);
      hkLen = Arrays.copyOf(hkLen, c);
      hvBase = Arrays.copyOf(hvBase, c);
      hvOff = Arrays.copyOf(hvOff, c);
      hvLen = Arrays.copyOf(hvLen, c);
    }
    hkBase[hn] = b;
    hkOff[hn] = kOff;
    hkLen[hn] = kLen;
    hvBase[hn] = b;
    hvOff[hn] = vOff;
    hvLen[hn] = vLen;
    hn++;
  }

  /** The row at index n is complete. */
  void commit() {
    n++;
    if (headers) hStart[n] = hn;
  }

  /** Rows nobody reads a field of (count(*), partition, topic): counted, not decoded. */
  void count(int rows) {
    n += rows;
  }

  ColumnarBatch build(TaskPlan plan, TaskPlan.Split split) {
    ColumnVector[] cols = new ColumnVector[plan.sources.length];
    for (int i = 0; i < cols.length; i++) {
      switch (plan.sources[i]) {
        case "key": cols[i] = new Cols.Bytes(DataTypes.BinaryType, keyBase, keyOff, keyLen, n); break;
        case "value": cols[i] = new Cols.Bytes(DataTypes.BinaryType, valBase, valOff, valLen, n); break;
        case "topic": cols[i] = new Cols.ConstString(split.topic); break;
        case "partition": cols[i] = new Cols.ConstInt(split.partition); break;
        case "offset": cols[i] = new Cols.Longs(DataTypes.LongType, offsets); break;
        case "timestamp": cols[i] = new Cols.Longs(DataTypes.TimestampType, ts); break;
        case "timestampType": cols[i] = new Cols.Ints(tsType); break;
        case "headers":
          cols[i] = new Cols.Headers(hStart, hNull, n, new Cols.Struct(Cols.HEADER,
              new Cols.Bytes(DataTypes.StringType, hkBase, hkOff, hkLen, hn),
              new Cols.Bytes(DataTypes.BinaryType, hvBase, hvOff, hvLen, hn)));
          break;
        default: throw new IllegalStateException("unknown column " + plan.sources[i]);
      }
    }
    return new ColumnarBatch(cols, n);
  }
}
