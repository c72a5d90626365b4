package kafkalog.jvm;

import java.util.Arrays;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark column vectors over what the decoder collected (Spark's public ColumnVector API): the
 * bytes of keys, values and headers are not copied out of the file or decompression buffers
 * they were read into; Spark copies a value only when it asks for it.
 */
final class Cols {
  private Cols() {}

  static final StructType HEADER = new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType);
  static final ArrayType HEADERS = new ArrayType(HEADER, true);

  /** Every accessor refuses; each column overrides what its type reads. */
  abstract static class Base extends ColumnVector {
    Base(DataType type) {
      super(type);
    }

    @Override public void close() {}
    @Override public boolean hasNull() { return false; }
    @Override public int numNulls() { return 0; }
    @Override public boolean isNullAt(int rowId) { return false; }
    @Override public boolean getBoolean(int rowId) { throw new UnsupportedOperationException(); }
    @Override public byte getByte(int rowId) { throw new UnsupportedOperationException(); }
    @Override public short getShort(int rowId) { throw new UnsupportedOperationException(); }
    @Override public int getInt(int rowId) { throw new UnsupportedOperationException(); }
    @Override public long getLong(int rowId) { throw new UnsupportedOperationException(); }
    @Override public float getFloat(int rowId) { throw new UnsupportedOperationException(); }
    @Override public double getDouble(int rowId) { throw new UnsupportedOperationException(); }
    @Override public ColumnarArray getArray(int rowId) { throw new UnsupportedOperationException(); }
    @Override public ColumnarMap getMap(int ordinal) { throw new UnsupportedOperationException(); }
    @Override public Decimal getDecimal(int rowId, int precision, int scale) { throw new UnsupportedOperationException(); }
    @Override public UTF8String getUTF8String(int rowId) { throw new UnsupportedOperationException(); }
    @Override public byte[] getBinary(int rowId) { throw new UnsupportedOperationException(); }
    @Override public ColumnVector getChild(int ordinal) { throw new UnsupportedOperationException(); }
  }

  static final class Longs extends Base {
    private final long[] v;

    Longs(DataType type, long[] v) {
      super(type);
      this.v = v;
    }

    @Override public long getLong(int rowId) { return v[rowId]; }
  }

  static final class Ints extends Base {
    private final int[] v;

    Ints(int[] v) {
      super(DataTypes.IntegerType);
      this.v = v;
    }

    @Override public int getInt(int rowId) { return v[rowId]; }
  }

  static final class ConstInt extends Base {
    private final int v;

    ConstInt(int v) {
      super(DataTypes.IntegerType);
      this.v = v;
    }

    @Override public int getInt(int rowId) { return v; }
  }

  static final class ConstString extends Base {
    private final UTF8String v;

    ConstString(String v) {
      super(DataTypes.StringType);
      this.v = UTF8String.fromString(v);
    }

    @Override public UTF8String getUTF8String(int rowId) { return v; }
  }

  /** Byte strings in place: base array, offset and length (-1: null) per row. */
  static final class Bytes extends Base {
    private final byte[][] base;
    private final int[] off;
    private final int[] len;
    private final int nulls;

    Bytes(DataType type, byte[][] base, int[] off, int[] len, int rows) {
      super(type);
      this.base = base;
      this.off = off;
      this.len = len;
      int n = 0;
      for (int i = 0; i < rows; i++) if (len[i] < 0) n++;
      this.nulls = n;
    }

    @Override public boolean hasNull() { return nulls > 0; }
    @Override public int numNulls() { return nulls; }
    @Override public boolean isNullAt(int rowId) { return len[rowId] < 0; }

    @Override
    public byte[] getBinary(int rowId) {
      int n = len[rowId];
      if (n < 0) return null;
      return Arrays.copyOfRange(base[rowId], off[rowId], off[rowId] + n);
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      int n = len[rowId];
      if (n < 0) return null;
      return UTF8String.fromBytes(base[rowId], off[rowId], n);
    }
  }

  static final class Struct extends Base {
    private final ColumnVector[] children;

    Struct(StructType type, ColumnVector... children) {
      super(type);
      this.children = children;
    }

    @Override public ColumnVector getChild(int ordinal) { return children[ordinal]; }
  }

  /** array of (key, value) per row: row i holds headers start[i] .. start[i + 1]. */
  static final class Headers extends Base {
    private final int[] start;
    private final boolean[] isNull;
    private final int nulls;
    private final Struct items;

    Headers(int[] start, boolean[] isNull, int rows, Struct items) {
      super(HEADERS);
      this.start = start;
      this.isNull = isNull;
      this.items = items;
      int n = 0;
      for (int i = 0; i < rows; i++) if (isNull[i]) n++;
      this.nulls = n;
    }

    @Override public boolean hasNull() { return nulls > 0; }
    @Override public int numNulls() { return nulls; }
    @Override public boolean isNullAt(int rowId) { return isNull[rowId]; }

    @Override
    public ColumnarArray getArray(int rowId) {
      if (isNull[rowId]) return null;
      return new ColumnarArray(items, start[rowId], start[rowId + 1] - start[rowId]);
    }
  }
}
