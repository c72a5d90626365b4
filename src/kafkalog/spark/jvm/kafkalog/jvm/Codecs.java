package kafkalog.jvm;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;
import java.util.zip.GZIPInputStream;
import net.jpountz.lz4.LZ4Factory;
import net.jpountz.lz4.LZ4SafeDecompressor;
import org.xerial.snappy.Snappy;

/**
 * Kafka's five codecs, each bounded: a payload inflates to at most {@link #limit} bytes (the
 * Python reader's bound, kafkalog.records.types.Limits). Anything unexpected throws {@link
 * SplitReader.Fallback}: the Python reader then reads those bytes and says what is wrong, naming
 * file and byte.
 */
final class Codecs {
  private Codecs() {}

  static final LZ4SafeDecompressor LZ4 = LZ4Factory.fastestInstance().safeDecompressor();
  private static final byte[] XERIAL = {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};

  /** kafkalog.records.types.Limits.decompressed_bound */
  static int limit(int compressed) {
    long bound = Math.max((long) compressed * 1024, 4L << 20);
    return (int) Math.min(bound, 256L << 20);
  }

  /** The payload decompressed: a fresh array and its length in {@code size[0]}. */
  static byte[] decompress(int codec, byte[] b, int off, int len, int[] size) {
    int limit = limit(len);
    try {
      switch (codec) {
        case 1: return stream(new GZIPInputStream(new ByteArrayInputStream(b, off, len), 8192), limit, size, len);
        case 2: return snappy(b, off, len, limit, size);
        case 3: return lz4(b, off, len, limit, size);
        case 4: return stream(new ZstdInputStreamNoFinalizer(new ByteArrayInputStream(b, off, len)), limit, size, len);
        default: throw new SplitReader.Fallback("codec " + codec);
      }
    } catch (IOException | RuntimeException e) {
      if (e instanceof SplitReader.Fallback) throw (SplitReader.Fallback) e;
      throw new SplitReader.Fallback("codec " + codec + ": " + e);
    }
  }

  private static byte[] stream(InputStream in, int limit, int[] size, int len) throws IOException {
    try (InputStream s = in) {
      byte[] out = new byte[Math.min(limit, Math.max(4096, len * 4))];
      int n = 0;
      while (true) {
        if (n == out.length) {
          if (out.length >= limit) {
            if (s.read() < 0) break;
            throw new SplitReader.Fallback("over the decompression limit");
          }
          out = Arrays.copyOf(out, (int) Math.min(limit, (long) out.length * 2));
        }
        int r = s.read(out, n, out.length - n);
        if (r < 0) break;
        n += r;
      }
      size[0] = n;
      return out;
    }
  }

  private static boolean xerialAt(byte[] b, int p, int end) {
    if (end - p < 16) return false;
    for (int i = 0; i < 8; i++) if (b[p + i] != XERIAL[i]) return false;
    return true;
  }

  private static int beInt(byte[] b, int p) {
    return ((b[p] & 0xff) << 24) | ((b[p + 1] & 0xff) << 16) | ((b[p + 2] & 0xff) << 8) | (b[p + 3] & 0xff);
  }

  private static int leInt(byte[] b, int p) {
    return (b[p] & 0xff) | ((b[p + 1] & 0xff) << 8) | ((b[p + 2] & 0xff) << 16) | ((b[p + 3] & 0xff) << 24);
  }

  /** xerial framing (a header, then length-prefixed raw blocks; headers may repeat), or one raw
   * snappy block as librdkafka writes. */
  private static byte[] snappy(byte[] b, int off, int len, int limit, int[] size) throws IOException {
    int end = off + len;
    if (!xerialAt(b, off, end)) {
      int n = Snappy.uncompressedLength(b, off, len);
      if (n < 0 || n > limit) throw new SplitReader.Fallback("snappy size");
      byte[] out = new byte[n];
      size[0] = Snappy.uncompress(b, off, len, out, 0);
      return out;
    }
    // first pass: sizes, so one array holds the output
    long total = 0;
    int p = off;
    while (p < end) {
      if (xerialAt(b, p, end)) {
        p += 16;
        continue;
      }
      if (end - p < 4) throw new SplitReader.Fallback("snappy chunk length");
      int n = beInt(b, p);
      if (n < 0 || n > end - p - 4) throw new SplitReader.Fallback("snappy chunk");
      total += Snappy.uncompressedLength(b, p + 4, n);
      if (total > limit) throw new SplitReader.Fallback("snappy size");
      p += 4 + n;
    }
    byte[] out = new byte[(int) total];
    int o = 0;
    p = off;
    while (p < end) {
      if (xerialAt(b, p, end)) {
        p += 16;
        continue;
      }
      int n = beInt(b, p);
      o += Snappy.uncompress(b, p + 4, n, out, o);
      p += 4 + n;
    }
    size[0] = o;
    return out;
  }

  /** Kafka's LZ4 frame (KafkaLZ4BlockInputStream): independent blocks; the header checksum is
   * not checked (magic 0 writers hashed it wrongly, KAFKA-3160; the batch CRC covers it). */
  private static byte[] lz4(byte[] b, int off, int len, int limit, int[] size) {
    int end = off + len;
    byte[] out = new byte[Math.min(limit, Math.max(65536, len * 4))];
    int o = 0;
    int p = off;
    while (p < end) {
      if (end - p < 7 || leInt(b, p) != 0x184D2204) throw new SplitReader.Fallback("lz4 magic");
      int flg = b[p + 4] & 0xff;
      int bd = b[p + 5] & 0xff;
      if ((flg >> 6) != 1) throw new SplitReader.Fallback("lz4 version");
      boolean blockChecksum = (flg & 0x10) != 0;
      boolean contentSize = (flg & 0x08) != 0;
      boolean contentChecksum = (flg & 0x04) != 0;
      int blockMax = 1 << (8 + 2 * ((bd >> 4) & 7));
      if (((bd >> 4) & 7) < 4) throw new SplitReader.Fallback("lz4 block size");
      p += 6 + (contentSize ? 8 : 0) + 1;
      while (true) {
        if (end - p < 4) throw new SplitReader.Fallback("lz4 block length");
        int raw = leInt(b, p);
        p += 4;
        if (raw == 0) break;
        boolean stored = (raw & 0x80000000) != 0;
        int n = raw & 0x7fffffff;
        if (n > end - p || n > blockMax) throw new SplitReader.Fallback("lz4 block");
        if (o + blockMax > out.length) {
          if (out.length >= limit) throw new SplitReader.Fallback("over the decompression limit");
          out = Arrays.copyOf(out, (int) Math.min(limit, Math.max((long) out.length * 2, (long) o + blockMax)));
        }
        if (stored) {
          if (o + n > out.length) throw new SplitReader.Fallback("over the decompression limit");
          System.arraycopy(b, p, out, o, n);
          o += n;
        } else {
          o += LZ4.decompress(b, p, n, out, o, Math.min(blockMax, out.length - o));
        }
        p += n + (blockChecksum ? 4 : 0);
      }
      p += contentChecksum ? 4 : 0;
    }
    if (p != end) throw new SplitReader.Fallback("lz4 trailing bytes");
    size[0] = o;
    return out;
  }
}
