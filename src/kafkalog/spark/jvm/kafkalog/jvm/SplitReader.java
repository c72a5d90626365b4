package kafkalog.jvm;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One task: the planned byte ranges decoded into ColumnarBatches. Whole, valid batches are
 * decoded here; at the first entry that is anything else (a bad CRC or length, offsets out of
 * order, a codec failure, bytes ending mid-batch), or for a segment cut, swapped or remote, the
 * rest of the split goes to the Python reader ({@link PythonRest}), whose errors and warnings are
 * then the Python source's.
 */
final class SplitReader implements PartitionReader<ColumnarBatch> {
  /** bytes read at a time: small enough to stay in the cache between the read and the CRC */
  static final int CHUNK = 1 << 20;
  /** bytes of entries one batch of rows covers at most */
  static final int BATCH_BYTES = 8 << 20;
  static final int COUNT_CHUNK = 256 << 10;
  /** kafkalog.records.types.Limits.max_batch_bytes: one entry as stored, log overhead included */
  static final int MAX_ENTRY = 8 << 20;
  static final int MAX_ROWS = 1 << 16;

  private final TaskPlan plan;
  private int next;
  private TaskPlan.Split split;
  private FileChannel channel;
  private long pos;
  private long end;
  private boolean done;
  private long[][] aborted;
  private byte[] buf = new byte[0];
  private long bufPos = -1;
  private int bufLen;
  private PythonRest rest;
  private ColumnarBatch current;
  /** the rows of the batch being built: its arrays reused batch after batch (Spark is done with
   * a batch when it asks for the next, as with its own Parquet reader's vectors) */
  private Rows rows;
  /** chunk arrays the rows of the batch being built may point into, and arrays free for reuse */
  private final java.util.ArrayList<byte[]> used = new java.util.ArrayList<>();
  private final java.util.ArrayDeque<byte[]> free = new java.util.ArrayDeque<>();
  /** count mode's chunk: direct, so a chunk is copied once (by the kernel) and its CRCs are
   * computed while it is in the cache */
  private ByteBuffer direct;
  private long directPos;
  private int directLen;
  private final CRC32C crc32c = new CRC32C();
  private final CRC32 crc32 = new CRC32();
  private int cp; // cursor in a record payload
  /** the last offset of the entries walked so far (offsets must grow: a v2 base offset is
   * outside the batch CRC); the segment's base - 1 at a split's start, as the Python reader */
  private long prev;
  /** the segment file's size when the split was opened */
  private long fileSize;
  private final ByteBuffer peek = ByteBuffer.allocate(8);
  private long bytesRead;
  private long records;
  private long segments;
  /** the split the last batch came from */
  private TaskPlan.Split lastSplit;
  /** verified batch summaries (BatchSummaries): the current segment's, what this split's read
   * learned (null: not kept), where they live on this machine */
  private BatchSummaries.Segment known;
  /** the known entries' marks hold: the segment shows the stamp they were made under, so a
   * marked entry's header is the file's (BatchSummaries, "settled segments") */
  private boolean stamped;
  private int knownHint;
  private BatchSummaries.Learned learned;
  private Path summaryDir;
  private final byte[] hdr = new byte[61];
  private final ByteBuffer hdrBuf = ByteBuffer.wrap(hdr);
  /** what v2() found of the batch it read: its CRC checked, and its least record timestamp when
   * known (BatchSummaries.UNKNOWN if not walked) */
  private boolean vChecked;
  private long vMin;

  SplitReader(TaskPlan plan) {
    this.plan = plan;
  }

  /** Anything the fast path does not decode itself: the Python reader takes over from here. */
  static final class Fallback extends RuntimeException {
    Fallback(String why) {
      super(why, null, false, false);
    }
  }

  /** An ABORT marker (read_committed) no planned aborted transaction ends at: a .txnindex
   * deleted or cut short. The Python reader decides (kafkalog.log.abort_markers): the whole
   * split from its start when none of it was returned yet (it then sees the transaction and can
   * drop its records exactly), else the rest from the marker (an error naming file and byte,
   * or with failOnDataLoss=false a warning). */
  static final class UnlistedAbort extends RuntimeException {
    UnlistedAbort() {
      super("an ABORT marker no planned aborted transaction ends at", null, false, false);
    }
  }

  /** whether a batch of the current split was returned */
  private boolean splitReturned;

  /** Whether a transactional control batch needs walking under read_committed: its producer's planned aborted
   * transactions end at none of its offset (a COMMIT, or an ABORT whose .txnindex entry is lost)
   * and no delete horizon marks an emptied transaction's marker. */
  private boolean unlistedMarker(long pid, long base, int attrs) {
    if (aborted == null || (attrs & 0x30) != 0x30 || (attrs & 0x40) != 0) return false;
    for (long[] r : aborted) if (r[0] == pid && r[2] == base) return false;
    return true;
  }

  @Override
  public boolean next() throws IOException {
    current = null;
    while (true) {
      if (rest != null) {
        ColumnarBatch b = rest.next();
        if (b != null) {
          current = b;
          lastSplit = split;
          records += b.numRows();
          return true;
        }
        rest.close();
        rest = null;
        closeSplit();
        continue;
      }
      if (split == null) {
        if (next >= plan.splits.length) return false;
        openSplit(plan.splits[next++]);
        continue;
      }
      TaskPlan.Split s = split;
      if (rows == null) rows = new Rows(plan);
      rows.reset();
      recycle();
      try {
        decode(rows);
        if (done || pos >= end) closeSplit();
      } catch (UnlistedAbort u) {
        if (!splitReturned) {
          rows.reset(); // none of the split goes out: the Python reader reads it all
          rest = whole(s, u.getMessage());
        } else {
          if (!plan.fallback) throw new IllegalStateException("kafkalog: " + s.segment + " at byte " + pos + ": "
              + u.getMessage() + " (spark.kafkalog.jvm.fallback=false)");
          rest = PythonRest.start(plan, s, pos, prev + 1);
          fellBack = true;
        }
      } catch (Fallback f) {
        if (!plan.fallback) {
          throw new IllegalStateException("kafkalog: " + s.segment + " at byte " + pos + ": " + f.getMessage()
              + " (spark.kafkalog.jvm.fallback=false)");
        }
        Bridge.LOG.debug("kafkalog: " + s.segment + " at byte " + pos + ": " + f.getMessage()
            + "; the Python reader reads the rest of the split");
        rest = PythonRest.start(plan, s, pos, prev + 1);
        fellBack = true;
      }
      if (rows.n > 0) {
        records += rows.n;
        current = rows.build(plan, s);
        lastSplit = s;
        splitReturned = true;
        return true;
      }
    }
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  TaskPlan.Split lastSplit() {
    return lastSplit;
  }

  /** whether any of the splits read was handed to the Python reader (its warnings said) */
  private boolean fellBack;

  boolean fellBack() {
    return fellBack;
  }

  @Override
  public void close() throws IOException {
    if (rest != null) rest.close();
    rest = null;
    closeSplit();
    used.clear();
    free.clear();
    if (plan.statsDir != null) writeStats();
  }

  /** What this task read, as kafkalog.spark.stats.write leaves it. */
  private void writeStats() throws IOException {
    Path dir = Paths.get(plan.statsDir);
    Files.createDirectories(dir);
    Path file = dir.resolve("task-" + java.util.UUID.randomUUID().toString().replace("-", "") + ".json");
    Path tmp = Paths.get(file + ".tmp");
    String json = "{\"bytes_read\": " + bytesRead + ", \"records\": " + records + ", \"segments\": " + segments + "}";
    Files.write(tmp, json.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    Files.move(tmp, file, java.nio.file.StandardCopyOption.ATOMIC_MOVE);
  }

  private void closeSplit() throws IOException {
    if (learned != null && split != null) {
      Path dir = Paths.get(split.directory).toAbsolutePath().getParent();
      BatchSummaries.record(summaryDir, split.segment, split.identity[0], split.identity[1], learned, dir,
          plan.summaryFiles);
    }
    learned = null;
    known = null;
    stamped = false;
    if (channel != null) channel.close();
    channel = null;
    split = null;
    bufPos = -1;
    directPos = -1;
    directLen = 0;
  }

  /** The batch before is Spark's no longer: every chunk but the current one is free again. */
  private void recycle() {
    for (byte[] b : used) if (b != buf) free.add(b);
    used.clear();
    if (buf.length > 0) used.add(buf);
  }

  /** An array of at least n bytes, for a chunk (reused when one is free). */
  private byte[] take(int n) {
    byte[] b = null;
    for (java.util.Iterator<byte[]> it = free.iterator(); it.hasNext(); ) {
      byte[] c = it.next();
      if (c.length >= n) {
        b = c;
        it.remove();
        break;
      }
    }
    if (b == null) b = new byte[Math.max(n, CHUNK)];
    used.add(b);
    return b;
  }

  private PythonRest whole(TaskPlan.Split s, String why) throws IOException {
    if (!plan.fallback) throw new IllegalStateException("kafkalog: " + s.segment + ": " + why + " (spark.kafkalog.jvm.fallback=false)");
    fellBack = true;
    return PythonRest.start(plan, s, s.startPosition, s.baseOffset);
  }

  private void openSplit(TaskPlan.Split s) throws IOException {
    split = s;
    splitReturned = false;
    done = false;
    prev = s.baseOffset - 1;
    aborted = plan.aborted.get(s.directory);
    if (s.segment.contains("://")) {
      rest = whole(s, "remote");
      return;
    }
    Path path = Paths.get(s.segment);
    long[] stamp = null;
    try {
      if (s.identity != null) {
        // the stamp before any byte is read: a write after it shows in a later stat
        Map<String, Object> id = Files.readAttributes(path, "unix:dev,ino,size,lastModifiedTime,ctime");
        if (((Number) id.get("dev")).longValue() != s.identity[0] || ((Number) id.get("ino")).longValue() != s.identity[1]) {
          rest = whole(s, "swapped"); // swapped: the Python reader says so
          return;
        }
        stamp = BatchSummaries.segmentStamp(((Number) id.get("size")).longValue(),
            ((java.nio.file.attribute.FileTime) id.get("lastModifiedTime")).to(java.util.concurrent.TimeUnit.NANOSECONDS),
            ((java.nio.file.attribute.FileTime) id.get("ctime")).to(java.util.concurrent.TimeUnit.NANOSECONDS),
            plan.summarySettleMs);
      }
      channel = FileChannel.open(path, StandardOpenOption.READ);
    } catch (NoSuchFileException | UnsupportedOperationException e) {
      rest = whole(s, "gone"); // gone, or renamed .deleted
      return;
    }
    long size = channel.size();
    fileSize = size;
    if (s.endPosition > size && size < s.plannedSize) {
      rest = whole(s, "cut"); // cut since planning
      return;
    }
    segments++;
    if (plan.summaries && s.identity != null) {
      if (summaryDir == null) summaryDir = BatchSummaries.dir(plan.summaryDir);
      known = BatchSummaries.load(summaryDir, s.segment, s.identity[0], s.identity[1]);
      stamped = known != null && known.stampedAs(stamp);
      knownHint = 0;
      learned = new BatchSummaries.Learned(stamp);
    }
    end = s.endPosition < 0 ? size : Math.min(s.endPosition, size);
    pos = s.startPosition;
    bufPos = -1;
    directPos = -1;
    directLen = 0;
  }

  /** The bytes [p, p + need) in buf (read into an array no row of the batch being built points
   * into); their index in buf. */
  private int at(long p, int need) throws IOException {
    if (bufPos >= 0 && p >= bufPos && p + need <= bufPos + bufLen) return (int) (p - bufPos);
    int n = (int) Math.min(Math.max(CHUNK, need), end - p);
    byte[] b = take(n);
    ByteBuffer bb = ByteBuffer.wrap(b, 0, n);
    while (bb.hasRemaining()) {
      int r = channel.read(bb, p + bb.position());
      if (r < 0) throw new Fallback("file ended early");
      bytesRead += r;
    }
    buf = b;
    bufPos = p;
    bufLen = n;
    return 0;
  }

  /** count mode: the bytes [p, p + need) in the direct chunk; their index there. */
  private int directAt(long p, int need) throws IOException {
    if (directPos >= 0 && p >= directPos && p + need <= directPos + directLen) return (int) (p - directPos);
    int n = (int) Math.min(Math.max(COUNT_CHUNK, need), end - p);
    if (direct == null || direct.capacity() < n) direct = ByteBuffer.allocateDirect(Math.max(COUNT_CHUNK, n));
    direct.clear().limit(n);
    while (direct.hasRemaining()) {
      int r = channel.read(direct, p + direct.position());
      if (r < 0) throw new Fallback("file ended early");
      bytesRead += r;
    }
    directPos = p;
    directLen = n;
    return 0;
  }

  /**
   * Whether the entry after one ending at byte {@code after} has an offset field above
   * {@code last} (true when the file holds no header there: the split's end offset bounds the
   * segment's last entry). A base offset is outside the batch CRC: moved up by less than a batch,
   * it shows only as an overlap with the batch after it, so an entry is decoded once the next
   * one is seen to follow it; when it does not, the Python reader reads from this entry and names
   * the one out of line (kafkalog.log.segment.held_is_damaged). A v0/v1 entry's field is its last
   * offset, never below its first. The next header is most often in a chunk already read.
   */
  private boolean followedInLine(long after, long last) throws IOException {
    if (after + 17 > fileSize) return true;
    long field;
    if (bufPos >= 0 && after >= bufPos && after + 8 <= bufPos + bufLen) {
      field = getLong(buf, (int) (after - bufPos));
    } else if (directPos >= 0 && after >= directPos && after + 8 <= directPos + directLen) {
      field = direct.getLong((int) (after - directPos));
    } else {
      peek.clear();
      while (peek.hasRemaining()) {
        int r = channel.read(peek, after + peek.position());
        if (r < 0) return true;
        bytesRead += r;
      }
      field = peek.getLong(0);
    }
    return field > last;
  }

  static long getLong(byte[] b, int i) {
    return ((long) getInt(b, i) << 32) | (getInt(b, i + 4) & 0xffffffffL);
  }

  static int getInt(byte[] b, int i) {
    return ((b[i] & 0xff) << 24) | ((b[i + 1] & 0xff) << 16) | ((b[i + 2] & 0xff) << 8) | (b[i + 3] & 0xff);
  }

  private void decode(Rows rows) throws IOException {
    long stopAt = pos + BATCH_BYTES;
    boolean window = plan.tsLo != null || plan.tsHi != null || plan.exactWindow();
    boolean counting = !rows.perRow && !window;
    // summaries serve where the headers are walked anyway: windows, CRC-checked counts
    boolean useKnown = known != null && (window || (counting && (plan.checkCrcs || plan.counts == null || stamped)));
    while (pos < end && !done && pos < stopAt && rows.n < MAX_ROWS) {
      int n0 = rows.n;
      int hn0 = rows.hn;
      long prev0 = prev;
      try {
        if (useKnown && knownEntry(rows, counting)) continue;
        if (!counting || !countEntry(rows)) entry(rows);
      } catch (Fallback | UnlistedAbort f) {
        // none of this entry's rows: the Python reader reads it again, from its first byte
        rows.n = n0;
        rows.hn = hn0;
        prev = prev0;
        throw f;
      }
    }
  }

  /** The entry at pos decoded from a heap copy; pos moved past it. */
  private void entry(Rows rows) throws IOException {
    if (end - pos < 12) throw new Fallback("bytes after the last whole entry");
    int i = at(pos, 12);
    long length = getInt(buf, i + 8);
    long size = 12 + length;
    if (length < 14 || size > MAX_ENTRY || pos + size > end) throw new Fallback("entry length " + length);
    i = at(pos, (int) size);
    int magic = buf[i + 16];
    if (magic == 2) {
      vChecked = false;
      v2(rows, buf, i, (int) size);
      if (vChecked && learned != null) learned.add(pos, buf, i, vMin);
    } else if (magic == 0 || magic == 1) legacy(rows, buf, i, (int) size);
    else throw new Fallback("magic " + magic);
    pos += size;
  }

  /** count mode (no column per record): a whole v2 batch of the range, of no aborted transaction,
   * counted from its header once its CRC matched, read from the direct chunk; false: anything
   * else (a legacy entry, a batch at an end of the range, an aborted transaction's, a check
   * failed), which {@link #entry} then decodes or refuses as it does in every mode. */
  private boolean countEntry(Rows rows) throws IOException {
    if (end - pos < 61) return false;
    if (!plan.checkCrcs && plan.counts != null) return countHeader(rows);
    int i = directAt(pos, 61);
    ByteBuffer d = direct;
    long length = d.getInt(i + 8);
    long size = 12 + length;
    if (length < 49 || size > MAX_ENTRY || pos + size > end || d.get(i + 16) != 2) return false;
    i = directAt(pos, (int) size);
    long base = d.getLong(i);
    int attrs = d.getShort(i + 21) & 0xffff;
    int lastDelta = d.getInt(i + 23);
    long pid = d.getLong(i + 43);
    int count = d.getInt(i + 57);
    TaskPlan.Split s = split;
    if (lastDelta < 0 || count < 0 || count > lastDelta + 1L || count > (size - 61) / MIN_RECORD) return false;
    long last = base + lastDelta;
    if (base <= prev || base < s.startOffset || last >= s.endOffset || (attrs & 7) > 4) return false;
    if (unlistedMarker(pid, base, attrs)) return false; // its type is read by v2()
    if ((attrs & 0x10) != 0 && aborted != null) {
      for (long[] r : aborted) if (r[0] == pid && r[1] <= last && r[2] >= base) return false;
    }
    if (!followedInLine(pos + size, last)) return false;
    crc32c.reset();
    crc32c.update(d.slice(i + 21, (int) size - 21));
    if ((int) crc32c.getValue() != d.getInt(i + 17)) return false;
    if (learned != null) {
      d.get(i, hdr, 0, 61);
      learned.add(pos, hdr, 0, (attrs & 0x08) != 0 ? d.getLong(i + 35) : BatchSummaries.UNKNOWN);
    }
    prev = last;
    if ((attrs & 0x20) == 0) rows.count(count); // a control batch holds no rows
    pos += size;
    return true;
  }

  /** checkCrcs=false: a whole v2 batch of the range, of no aborted transaction, counted from its
   * header alone (61 bytes read), after every check that needs no more bytes; false: anything
   * else, which {@link #entry} decodes with its CRC checked. */
  private boolean countHeader(Rows rows) throws IOException {
    if (header == null) header = ByteBuffer.allocateDirect(61);
    header.clear();
    while (header.hasRemaining()) {
      int r = channel.read(header, pos + header.position());
      if (r < 0) return false;
      bytesRead += r;
    }
    ByteBuffer d = header;
    long length = d.getInt(8);
    long size = 12 + length;
    if (length < 49 || size > MAX_ENTRY || pos + size > end || d.get(16) != 2) return false;
    long base = d.getLong(0);
    int attrs = d.getShort(21) & 0xffff;
    int lastDelta = d.getInt(23);
    long pid = d.getLong(43);
    int count = d.getInt(57);
    TaskPlan.Split s = split;
    if (lastDelta < 0 || count < 0 || count > lastDelta + 1L || count > (size - 61) / MIN_RECORD) return false;
    long last = base + lastDelta;
    if (base <= prev || base < s.startOffset || last >= s.endOffset || (attrs & 7) > 4) return false;
    boolean control = (attrs & 0x20) != 0;
    if (control && ((attrs & 0x10) == 0 || count != 1 || lastDelta != 0)) return false; // a control batch: one marker
    if (unlistedMarker(pid, base, attrs)) return false; // its type is read by v2()
    if ((attrs & 0x10) != 0 && aborted != null) {
      for (long[] r : aborted) if (r[0] == pid && r[1] <= last && r[2] >= base) return false;
    }
    if (!followedInLine(pos + size, last)) return false;
    prev = last;
    if (!control) rows.count(count);
    pos += size;
    return true;
  }

  private ByteBuffer header;

  /** The 61 header bytes at pos in hdr: from a chunk already read, else one read; false if the
   * file ends first. */
  private boolean header61() throws IOException {
    if (bufPos >= 0 && pos >= bufPos && pos + 61 <= bufPos + bufLen) {
      System.arraycopy(buf, (int) (pos - bufPos), hdr, 0, 61);
      return true;
    }
    if (directPos >= 0 && pos >= directPos && pos + 61 <= directPos + directLen) {
      direct.get((int) (pos - directPos), hdr, 0, 61);
      return true;
    }
    hdrBuf.clear();
    while (hdrBuf.hasRemaining()) {
      int r = channel.read(hdrBuf, pos + hdrBuf.position());
      if (r < 0) return false;
      bytesRead += r;
    }
    return true;
  }

  /**
   * A v2 batch at pos whose 61 header bytes are a verified batch summary's entry (same position,
   * size, CRC field, base offset and header CRC32C; or, the segment stamped as its marks were,
   * a marked entry's header taken unread), after countHeader's structural checks:
   * counting, a whole batch of the range and of no aborted transaction is counted from its
   * header unread; in a timestamp window, a batch no record of which can match ([least, max]
   * timestamp outside the window; a control batch; before the range) is skipped unread. False:
   * anything else, which is read as without summaries.
   */
  private boolean knownEntry(Rows rows, boolean counting) throws IOException {
    if (end - pos < 61) return false;
    byte[] h;
    int o;
    int k = stamped ? known.find(pos, knownHint) : -1;
    if (k >= 0 && known.marked[k]) {
      h = known.headers;
      o = k * BatchSummaries.HEADER;
    } else {
      if (!header61()) return false;
      h = hdr;
      o = 0;
      k = known.find(pos, knownHint);
      if (k < 0) return false;
      long base = getLong(h, 0);
      if (known.size[k] != 12 + (long) getInt(h, 8) || known.crc[k] != getInt(h, 17) || known.base[k] != base) return false;
      crc32c.reset();
      crc32c.update(h, 0, 61);
      if ((int) crc32c.getValue() != known.hash[k]) return false;
      if (learned != null) learned.confirm(pos);
    }
    long length = getInt(h, o + 8);
    long size = 12 + length;
    if (length < 49 || size > MAX_ENTRY || pos + size > end || h[o + 16] != 2) return false;
    long base = getLong(h, o);
    int attrs = ((h[o + 21] & 0xff) << 8) | (h[o + 22] & 0xff);
    int lastDelta = getInt(h, o + 23);
    long maxTs = getLong(h, o + 35);
    long pid = getLong(h, o + 43);
    int count = getInt(h, o + 57);
    TaskPlan.Split s = split;
    if (lastDelta < 0 || count < 0 || count > lastDelta + 1L || count > (size - 61) / MIN_RECORD) return false;
    long last = base + lastDelta;
    if (base <= prev || (attrs & 7) > 4) return false;
    boolean control = (attrs & 0x20) != 0;
    if (control && ((attrs & 0x10) == 0 || count != 1 || lastDelta != 0)) return false; // a control batch: one marker
    if (unlistedMarker(pid, base, attrs)) return false; // its type is read by v2()
    if (counting) {
      if (base < s.startOffset || last >= s.endOffset) return false;
      if ((attrs & 0x10) != 0 && aborted != null) {
        for (long[] r : aborted) if (r[0] == pid && r[1] <= last && r[2] >= base) return false;
      }
      if (!control) rows.count(count);
    } else {
      if (base >= s.endOffset) return false; // where the split ends: entry() says so
      long least = (attrs & 0x08) != 0 ? maxTs : known.minTs[k];
      boolean skip = control || last < s.startOffset || (plan.tsLo != null && maxTs < plan.tsLo)
          || (plan.tsHi != null && least != BatchSummaries.UNKNOWN && least >= plan.tsHi);
      if (!skip && !wholeInWindow(rows, base, last, attrs, pid, least, maxTs, count)) return false;
    }
    knownHint = k + 1;
    prev = last;
    pos += size;
    return true;
  }

  /**
   * A count over a window the scan takes whole: a batch of the range, of no aborted
   * transaction, every record of which is inside the window (its verified least timestamp and
   * its max timestamp both kept; LogAppendTime: its max is every record's) counted from its
   * header, as v2() counts such a batch after walking it. False: its records are walked.
   */
  private boolean wholeInWindow(Rows rows, long base, long last, int attrs, long pid, long least, long maxTs,
      int count) {
    if (rows.perRow || !plan.exactWindow() || least == BatchSummaries.UNKNOWN || (attrs & 0x20) != 0) return false;
    if (base < split.startOffset || last >= split.endOffset) return false;
    if (!plan.keepTs(least * 1000) || !plan.keepTs(maxTs * 1000)) return false;
    if ((attrs & 0x10) != 0 && aborted != null) {
      for (long[] r : aborted) if (r[0] == pid && r[1] <= last && r[2] >= base) return false;
    }
    rows.count(count);
    return true;
  }

  /** The fewest bytes a v2 record takes: its length, attributes, timestamp and offset deltas,
   * key and value lengths and header count, one byte each. */
  static final int MIN_RECORD = 7;

  // ---- v2 record batches ----------------------------------------------------------------------

  private void v2(Rows rows, byte[] b, int i, int size) throws IOException {
    if (size < 61) throw new Fallback("short batch");
    crc32c.reset();
    crc32c.update(b, i + 21, size - 21);
    if ((int) crc32c.getValue() != getInt(b, i + 17)) throw new Fallback("crc");
    long base = getLong(b, i);
    int attrs = ((b[i + 21] & 0xff) << 8) | (b[i + 22] & 0xff);
    vChecked = true;
    vMin = (attrs & 0x08) != 0 ? getLong(b, i + 35) : BatchSummaries.UNKNOWN;
    int lastDelta = getInt(b, i + 23);
    long baseTs = getLong(b, i + 27);
    long maxTs = getLong(b, i + 35);
    long pid = getLong(b, i + 43);
    int count = getInt(b, i + 57);
    if (lastDelta < 0 || count < 0 || count > size) throw new Fallback("counts");
    long last = base + lastDelta;
    if (base <= prev) throw new Fallback("offsets do not grow");
    if (!followedInLine(pos + size, last)) throw new Fallback("the entry after it does not follow it");
    prev = last;
    TaskPlan.Split s = split;
    if (base >= s.endOffset) {
      done = true;
      return;
    }
    if (last >= s.startOffset && unlistedMarker(pid, base, attrs) && abortMarker(b, i, size, attrs)) {
      throw new UnlistedAbort();
    }
    if (last < s.startOffset || (attrs & 0x20) != 0) return; // before the range; a control batch
    int codec = attrs & 7;
    if (codec > 4) throw new Fallback("codec " + codec);
    boolean logAppend = (attrs & 0x08) != 0;
    boolean abortedHere = false;
    if ((attrs & 0x10) != 0 && aborted != null) {
      for (long[] r : aborted) if (r[0] == pid && r[1] <= last && r[2] >= base) abortedHere = true;
    }
    // pushed-down timestamp bounds: a batch no record of which can match is not decoded
    if (plan.tsLo != null && maxTs < plan.tsLo) return;
    byte[] pb = b;
    int po = i + 61;
    int pe = i + size;
    boolean inflated = false;
    if (plan.tsHi != null && (logAppend ? maxTs : baseTs) >= plan.tsHi) {
      if (logAppend) return;
      if (codec != 0) {
        int[] n = new int[1];
        pb = Codecs.decompress(codec, b, po, pe - po, n);
        po = 0;
        pe = n[0];
        inflated = true;
      }
      long least = minTimestamp(pb, po, pe, count, baseTs);
      vMin = least;
      if (least >= plan.tsHi) return;
    }
    boolean whole = base >= s.startOffset && last < s.endOffset && !abortedHere;
    // with timestamps taken whole, a batch is counted unread only when every record's
    // timestamp is known inside them: a LogAppendTime batch's are all its max timestamp; a
    // CreateTime batch's records are walked
    if (whole && plan.exactWindow() && !(logAppend && plan.keepTs(maxTs * 1000))) whole = false;
    if (!rows.perRow && whole) {
      rows.count(count);
      return;
    }
    if (codec != 0 && !inflated) {
      int[] n = new int[1];
      pb = Codecs.decompress(codec, b, po, pe - po, n);
      po = 0;
      pe = n[0];
    }
    records(rows, pb, po, pe, base, lastDelta, baseTs, maxTs, logAppend, count, pid, abortedHere);
  }

  /** Whether the control batch at b[i, i + size) is an ABORT marker: its one record's key is
   * (version, type) and type 0 is ABORT; anything unexpected goes to the Python reader. */
  private boolean abortMarker(byte[] b, int i, int size, int attrs) {
    if ((attrs & 7) != 0 || getInt(b, i + 57) != 1) throw new Fallback("control batch");
    int pe = i + size;
    cp = i + 61;
    varint(b, pe); // the record's length
    cp++; // its attributes
    varlong(b, pe); // timestamp delta
    varint(b, pe); // offset delta
    int kl = varint(b, pe);
    if (kl < 4 || cp + 4 > pe) throw new Fallback("control record key");
    return (((b[cp + 2] & 0xff) << 8) | (b[cp + 3] & 0xff)) == 0;
  }

  private int varint(byte[] b, int limit) {
    int c = cp;
    if (c < limit) {
      int x = b[c];
      if (x >= 0) { // one byte: most lengths, deltas and counts of small records
        cp = c + 1;
        return (x >>> 1) ^ -(x & 1);
      }
      if (c + 1 < limit && b[c + 1] >= 0) {
        int v = (x & 0x7f) | (b[c + 1] << 7);
        cp = c + 2;
        return (v >>> 1) ^ -(v & 1);
      }
    }
    return varintSlow(b, limit);
  }

  private int varintSlow(byte[] b, int limit) {
    int v = (int) unsignedVar(b, limit, 35); // an int's low 32 bits, as Kafka's readVarint
    return (v >>> 1) ^ -(v & 1);
  }

  /** A varint's or varlong's unsigned bits (before the zigzag), of at most maxBits / 7 bytes. */
  private long unsignedVar(byte[] b, int limit, int maxBits) {
    long v = 0;
    for (int shift = 0; shift < maxBits; shift += 7) {
      if (cp >= limit) throw new Fallback("varint past the end");
      int x = b[cp++];
      v |= (long) (x & 0x7f) << shift;
      if (x >= 0) return v;
    }
    throw new Fallback("varint too long");
  }

  private long varlong(byte[] b, int limit) {
    int c = cp;
    if (c + 2 < limit) { // up to three bytes without a bound check each: timestamp deltas
      int x = b[c];
      if (x >= 0) {
        cp = c + 1;
        return (x >>> 1) ^ -(x & 1);
      }
      int y = b[c + 1];
      if (y >= 0) {
        long v = (x & 0x7f) | (y << 7);
        cp = c + 2;
        return (v >>> 1) ^ -(v & 1);
      }
      int z = b[c + 2];
      if (z >= 0) {
        long v = (x & 0x7f) | ((y & 0x7f) << 7) | (z << 14);
        cp = c + 3;
        return (v >>> 1) ^ -(v & 1);
      }
    }
    return varlongSlow(b, limit);
  }

  private long varlongSlow(byte[] b, int limit) {
    long v = unsignedVar(b, limit, 70);
    return (v >>> 1) ^ -(v & 1);
  }

  /** The smallest record timestamp of a CreateTime batch (its base is the first's, not the least). */
  private long minTimestamp(byte[] b, int po, int pe, int count, long baseTs) {
    long min = Long.MAX_VALUE;
    cp = po;
    for (int k = 0; k < count; k++) {
      int len = varint(b, pe);
      int recEnd = cp + len;
      if (len <= 0 || recEnd > pe || recEnd < cp) throw new Fallback("record length");
      cp++;
      min = Math.min(min, baseTs + varlong(b, recEnd));
      cp = recEnd;
    }
    return min;
  }

  private void records(Rows rows, byte[] b, int po, int pe, long base, int lastDelta, long baseTs, long maxTs,
      boolean logAppend, int count, long pid, boolean abortedHere) {
    TaskPlan.Split s = split;
    cp = po;
    int prev = -1;
    long least = Long.MAX_VALUE;
    for (int k = 0; k < count; k++) {
      int len = varint(b, pe);
      int recEnd = cp + len;
      if (len <= 0 || recEnd > pe || recEnd < cp) throw new Fallback("record length");
      cp++; // attributes
      long tsDelta = varlong(b, recEnd);
      int od = varint(b, recEnd);
      if (od <= prev || od > lastDelta) throw new Fallback("offset delta");
      if (baseTs + tsDelta < least) least = baseTs + tsDelta;
      prev = od;
      long offset = base + od;
      boolean keep = offset >= s.startOffset && offset < s.endOffset
          && plan.keepTs((logAppend ? maxTs : baseTs + tsDelta) * 1000);
      if (keep && abortedHere) {
        for (long[] r : aborted) if (r[0] == pid && offset >= r[1] && offset <= r[2]) keep = false;
      }
      int kl = varint(b, recEnd);
      int ko = cp;
      if (kl < -1 || (kl > 0 && (cp += kl) > recEnd)) throw new Fallback("key length");
      int vl = varint(b, recEnd);
      int vo = cp;
      if (vl < -1 || (vl > 0 && (cp += vl) > recEnd)) throw new Fallback("value length");
      int hc = varint(b, recEnd);
      if (hc < 0) throw new Fallback("header count");
      if (keep) {
        rows.room();
        // no header at all is null, as the Python reader gives it (not an empty array)
        if (rows.headers) rows.hNull[rows.n] = hc == 0;
      }
      for (int h = 0; h < hc; h++) {
        int hkl = varint(b, recEnd);
        int hko = cp;
        if (hkl < 0 || (cp += hkl) > recEnd) throw new Fallback("header key length");
        int hvl = varint(b, recEnd);
        int hvo = cp;
        if (hvl < -1 || (hvl > 0 && (cp += hvl) > recEnd)) throw new Fallback("header value length");
        if (keep && rows.headers) rows.header(b, hko, hkl, hvo, hvl);
      }
      if (cp != recEnd) throw new Fallback("record size");
      if (!keep) continue;
      int n = rows.n;
      rows.offsets[n] = offset;
      if (rows.timestamp) rows.ts[n] = (logAppend ? maxTs : baseTs + tsDelta) * 1000;
      if (rows.timestampType) rows.tsType[n] = logAppend ? 1 : 0;
      if (rows.key) {
        rows.keyBase[n] = b;
        rows.keyOff[n] = ko;
        rows.keyLen[n] = kl;
      }
      if (rows.value) {
        rows.valBase[n] = b;
        rows.valOff[n] = vo;
        rows.valLen[n] = vl;
      }
      rows.commit();
    }
    if (cp != pe) throw new Fallback("bytes after the last record");
    if (!logAppend && count > 0) vMin = least;
  }

  // ---- v0/v1 message sets ---------------------------------------------------------------------

  private void legacy(Rows rows, byte[] b, int i, int size) throws IOException {
    TaskPlan.Split s = split;
    long offset = getLong(b, i);
    if (offset <= prev) throw new Fallback("offsets do not grow");
    if (!followedInLine(pos + size, offset)) throw new Fallback("the entry after it does not follow it");
    long before = prev;
    prev = offset;
    if (offset >= s.endOffset && (b[i + 17] & 7) == 0) {
      done = true;
      return;
    }
    long ts = message(b, i, size, NO_TS, s);
    int attr = b[i + 17];
    int codec = attr & 7;
    if (codec == 0) {
      if (offset >= s.startOffset && offset < s.endOffset && plan.keepTs(ts * 1000)) {
        add(rows, b, offset, ts, mKey, mKeyLen, mVal, mValLen);
      }
      return;
    }
    if (codec > 3 || mValLen < 0) throw new Fallback("legacy codec " + codec);
    int magic = b[i + 16];
    boolean logAppend = magic == 1 && (attr & 0x08) != 0;
    int[] n = new int[1];
    byte[] in = Codecs.decompress(codec, b, mVal, mValLen, n);
    // first pass: where each inner message is, and the last (relative) offset
    int q = 0;
    int count = 0;
    long lastInner = -1;
    while (q < n[0]) {
      if (n[0] - q < 12) throw new Fallback("inner entry");
      long length = getInt(in, q + 8);
      if (length < 14 || q + 12 + length > n[0]) throw new Fallback("inner length");
      long o = getLong(in, q);
      if (o <= lastInner && count > 0) throw new Fallback("inner offsets");
      lastInner = o;
      count++;
      q += 12 + (int) length;
    }
    if (count == 0) throw new Fallback("empty wrapper");
    long shift = magic >= 1 ? offset - lastInner : 0;
    if (lastInner + shift != offset) throw new Fallback("wrapper offset is not its last record's");
    boolean firstInner = true;
    q = 0;
    while (q < n[0]) {
      int length = getInt(in, q + 8);
      long innerTs = message(in, q, 12 + length, logAppend ? ts : NO_TS, s);
      if ((in[q + 17] & 7) != 0) throw new Fallback("nested compression");
      long abs = getLong(in, q) + shift;
      if (firstInner && abs <= before) throw new Fallback("offsets do not grow");
      firstInner = false;
      if (abs >= s.startOffset && abs < s.endOffset && plan.keepTs(innerTs * 1000)) {
        add(rows, in, abs, innerTs, mKey, mKeyLen, mVal, mValLen);
      }
      q += 12 + length;
    }
    if (offset >= s.endOffset) done = true;
  }

  private static final long NO_TS = Long.MIN_VALUE;
  private int mKey;
  private int mKeyLen;
  private int mVal;
  private int mValLen;
  private int mTsType;

  /** One v0/v1 message at i: its CRC checked, key and value found (mKey..), its timestamp in ms
   * returned (-1 for magic 0) and its type in mTsType; {@code forcedTs} other than NO_TS: the
   * wrapper's LogAppendTime. */
  private long message(byte[] b, int i, int size, long forcedTs, TaskPlan.Split s) {
    int magic = b[i + 16];
    if (magic != 0 && magic != 1) throw new Fallback("legacy magic");
    int min = magic == 0 ? 26 : 34;
    if (size < min) throw new Fallback("short message");
    crc32.reset();
    crc32.update(b, i + 16, size - 16);
    if ((int) crc32.getValue() != getInt(b, i + 12)) throw new Fallback("crc");
    int attr = b[i + 17];
    int p = i + 18;
    long ts = -1;
    mTsType = -1;
    if (magic == 1) {
      ts = getLong(b, p);
      p += 8;
      mTsType = (attr & 0x08) != 0 ? 1 : 0;
    }
    if (forcedTs != NO_TS) {
      ts = forcedTs;
      mTsType = 1;
    }
    int e = i + size;
    mKeyLen = getInt(b, p);
    p += 4;
    mKey = p;
    if (mKeyLen < -1 || (mKeyLen > 0 && (p += mKeyLen) > e - 4)) throw new Fallback("key length");
    mValLen = getInt(b, p);
    p += 4;
    mVal = p;
    if (mValLen < -1 || (mValLen > 0 && (p += mValLen) > e)) throw new Fallback("value length");
    if (p != e) throw new Fallback("message size");
    return ts;
  }

  private void add(Rows rows, byte[] b, long offset, long ts, int ko, int kl, int vo, int vl) {
    rows.room();
    int n = rows.n;
    if (rows.headers) rows.hNull[n] = true;
    rows.offsets[n] = offset;
    if (rows.timestamp) rows.ts[n] = ts * 1000;
    if (rows.timestampType) rows.tsType[n] = mTsType;
    if (rows.key) {
      rows.keyBase[n] = b;
      rows.keyOff[n] = ko;
      rows.keyLen[n] = kl;
    }
    if (rows.value) {
      rows.valBase[n] = b;
      rows.valOff[n] = vo;
      rows.valLen[n] = vl;
    }
    rows.commit();
  }
}
