package kafkalog.jvm;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32C;

/**
 * Verified batch summaries: what a CRC-checked read of a v2 batch learned about it (its position,
 * its 61 header bytes and, when the read walked its records, its least record timestamp), kept
 * per segment file in kafkalog's cache directory ({@code $KAFKALOG_CACHE_DIR}, else
 * {@code $XDG_CACHE_HOME/kafkalog}, else {@code ~/.cache/kafkalog}; {@code batch-summaries/}
 * there), never beside the log.
 *
 * <p>A later read that walks the batch headers anyway finds a batch whose header equals an
 * entry's (same position, same 61 bytes) and knows it verified without reading it: a pushed-down
 * count takes its header count, a timestamp window skips it when [least, max timestamp] misses
 * the window. A header changed in any byte (truncation and re-append, a flip, a hole shifting
 * what follows, another file at that path) is no entry's: the batch is read as without summaries.
 * Only a flip inside the records, after the summary was written, goes unseen by a count or a
 * window that skips the batch (ARCHITECTURE.md, "Verified batch summaries").
 *
 * <p><b>Settled segments</b> need not even have their headers read. A file also keeps the
 * segment's stamp (size, mtime, ctime) as a read saw it before reading, when every one of those
 * times was older than the settle margin ({@code spark.kafkalog.batchSummaries.settleMs}, 2 s),
 * and marks the entries that read (or another under the same stamp) verified or found equal
 * in the file. A segment showing the same stamp later has not been written since (any write,
 * truncation or rename-over changes its ctime, which no one can set back, to a time past the
 * stamp's: git's racy-entry reasoning, as KeptAnswers'), so a marked entry's header is the
 * file's header at that position: a count or a window walks the kept headers, reading nothing
 * but the bytes of batches no marked entry covers. A segment being appended to has a new stamp
 * (and is not settled): only its headers are read, as above; the log's sealed segments cost
 * nothing.
 *
 * <p>A summary file (one per segment, keyed by its path and its (device, inode)) is written whole
 * to a temporary file and renamed; it carries its segment's identity and a CRC32C of itself, and
 * any file that does not check (damaged, truncated, another segment's, another format's) is
 * ignored and replaced by the next write. A file holds at most {@link #MAX_ENTRIES} entries and
 * the directory at most {@code spark.kafkalog.batchSummaries.maxFiles} files ({@link #prune}).
 * Nothing here is ever an error for the query: an unreadable or unwritable directory just means
 * no summaries.
 */
final class BatchSummaries {
  private BatchSummaries() {}

  /** the least timestamp is not known (the read did not walk the batch's records) */
  static final long UNKNOWN = Long.MIN_VALUE;
  /** entries one segment's file keeps at most (78 bytes each: ~10 MB) */
  static final int MAX_ENTRIES = 1 << 17;
  static final int HEADER = 61;
  /** position, least timestamp, marked, header */
  static final int ENTRY_BYTES = 8 + 8 + 1 + HEADER;
  private static final byte[] MAGIC = "KLBSUM02".getBytes(StandardCharsets.US_ASCII);
  private static final int MAX_PATH = 8192;
  /** conf: how old (ms) a segment's mtime and ctime must be for its stamp to be kept */
  static final String SETTLE_CONF = "spark.kafkalog.batchSummaries.settleMs";
  static final long SETTLE_MS = 2000;

  /** A segment's size, mtime and ctime (ns) as a read saw them before reading, or null when any
   * time was within the settle margin (the file may still be written in the same clock tick). */
  static long[] segmentStamp(long size, long mtimeNs, long ctimeNs, long settleMs) {
    long before = java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(System.currentTimeMillis() - settleMs);
    if (mtimeNs >= before || ctimeNs >= before) return null;
    return new long[] {size, mtimeNs, ctimeNs};
  }

  /** One segment's entries, sorted by position, none overlapping. */
  static final class Segment {
    final long[] pos;
    final int[] size;
    final int[] crc;
    final int[] hash;
    final long[] base;
    final long[] minTs;
    /** entry k verified or found equal in the file under {@link #stamp} */
    final boolean[] marked;
    /** the 61 header bytes of entry k at [k * 61, k * 61 + 61) */
    final byte[] headers;
    /** the segment's stamp the marks hold for (null: none) */
    long[] stamp;
    final int n;

    Segment(int n) {
      this.n = n;
      pos = new long[n];
      size = new int[n];
      crc = new int[n];
      hash = new int[n];
      base = new long[n];
      minTs = new long[n];
      marked = new boolean[n];
      headers = new byte[n * HEADER];
    }

    /** The fields kept beside the header, from it (entry k's header in place). */
    void derive(int k, CRC32C crc32c) {
      int o = k * HEADER;
      size[k] = 12 + SplitReader.getInt(headers, o + 8);
      crc[k] = SplitReader.getInt(headers, o + 17);
      base[k] = SplitReader.getLong(headers, o);
      crc32c.reset();
      crc32c.update(headers, o, HEADER);
      hash[k] = (int) crc32c.getValue();
    }

    /** Whether the marks hold for a segment showing {@code stamp} now. */
    boolean stampedAs(long[] now) {
      return stamp != null && now != null && java.util.Arrays.equals(stamp, now);
    }

    /** The entry at position p, or -1; {@code hint}: where the last one found was, plus one. */
    int find(long p, int hint) {
      if (hint >= 0 && hint < n && pos[hint] == p) return hint;
      int lo = 0;
      int hi = n - 1;
      while (lo <= hi) {
        int mid = (lo + hi) >>> 1;
        long v = pos[mid];
        if (v < p) lo = mid + 1;
        else if (v > p) hi = mid - 1;
        else return mid;
      }
      return -1;
    }
  }

  /** One entry as learned or merged. */
  static final class Entry {
    final long pos;
    final byte[] header;
    long minTs;
    boolean marked;

    Entry(long pos, byte[] header, long minTs, boolean marked) {
      this.pos = pos;
      this.header = header;
      this.minTs = minTs;
      this.marked = marked;
    }

    int size() {
      return 12 + SplitReader.getInt(header, 8);
    }
  }

  /** What one split's read learned, in the order read (positions grow). */
  static final class Learned {
    final List<Entry> entries = new ArrayList<>();
    /** positions of known entries whose header the read found equal in the file */
    final List<Long> confirmed = new ArrayList<>();
    /** the segment's stamp before the read (null: not settled; nothing gets marked) */
    final long[] stamp;

    Learned(long[] stamp) {
      this.stamp = stamp;
    }

    /** A v2 batch at pos whose CRC checked, its header at b[i..i+61). */
    void add(long pos, byte[] b, int i, long minTs) {
      if (entries.size() >= MAX_ENTRIES) return;
      entries.add(new Entry(pos, java.util.Arrays.copyOfRange(b, i, i + HEADER), minTs, stamp != null));
    }

    /** A known entry's header found equal in the file (marked if the stamp is kept). */
    void confirm(long pos) {
      if (stamp != null && confirmed.size() < MAX_ENTRIES) confirmed.add(pos);
    }

    /** Whether writing would add to {@code known}: a batch it lacks, a least timestamp, a mark. */
    boolean news(Segment known) {
      if (known == null) return !entries.isEmpty();
      boolean same = known.stampedAs(stamp);
      if (stamp != null && !same && !(entries.isEmpty() && confirmed.isEmpty())) return true;
      int hint = 0;
      for (Entry e : entries) {
        int k = known.find(e.pos, hint);
        if (k < 0 || !java.util.Arrays.equals(known.headers, k * HEADER, k * HEADER + HEADER, e.header, 0, HEADER)
            || (known.minTs[k] == UNKNOWN && e.minTs != UNKNOWN) || (e.marked && !known.marked[k])) {
          return true;
        }
        hint = k + 1;
      }
      hint = 0;
      for (long p : confirmed) {
        int k = known.find(p, hint);
        if (k >= 0 && !known.marked[k]) return true;
        if (k >= 0) hint = k + 1;
      }
      return false;
    }
  }

  /** The directory summaries live in on this machine: the conf's, else kafkalog's cache's. */
  static Path dir(String configured) {
    if (configured != null && !configured.isEmpty()) return Paths.get(configured);
    String explicit = System.getenv("KAFKALOG_CACHE_DIR");
    Path cache;
    if (explicit != null && !explicit.isEmpty()) {
      cache = Paths.get(explicit);
    } else {
      String xdg = System.getenv("XDG_CACHE_HOME");
      String base = xdg != null && !xdg.isEmpty() ? xdg : Paths.get(System.getProperty("user.home"), ".cache").toString();
      cache = Paths.get(base, "kafkalog");
    }
    return cache.resolve("batch-summaries");
  }

  private static Path file(Path dir, String segment, long dev, long ino) {
    try {
      MessageDigest d = MessageDigest.getInstance("SHA-256");
      d.update((segment + "\0" + dev + "\0" + ino).getBytes(StandardCharsets.UTF_8));
      StringBuilder s = new StringBuilder();
      byte[] h = d.digest();
      for (int i = 0; i < 16; i++) s.append(String.format("%02x", h[i]));
      return dir.resolve(s + ".sum");
    } catch (java.security.NoSuchAlgorithmException e) {
      throw new IllegalStateException(e); // every JDK has SHA-256
    }
  }

  /** Loaded files by path, as long as their size and mtime stay (bounded: cleared when full). */
  private static final ConcurrentHashMap<Path, Object[]> CACHE = new ConcurrentHashMap<>();
  private static final int CACHE_FILES = 4096;
  private static final ConcurrentHashMap<Path, Object> LOCKS = new ConcurrentHashMap<>();

  /** The summary of the segment at {@code segment} with that identity, or null (none, or a file
   * that does not check: never trusted, never an error). */
  static Segment load(Path dir, String segment, long dev, long ino) {
    try {
      return read(file(dir, segment, dev, ino), segment, dev, ino);
    } catch (IOException | RuntimeException e) {
      Bridge.LOG.debug("kafkalog: no batch summary for " + segment + ": " + e);
      return null;
    }
  }

  private static Segment read(Path f, String segment, long dev, long ino) throws IOException {
    BasicFileAttributes a;
    try {
      a = Files.readAttributes(f, BasicFileAttributes.class);
    } catch (NoSuchFileException e) {
      return null;
    }
    Object stamp = stamp(a);
    long length = a.size();
    Object[] c = CACHE.get(f);
    if (c != null && c[0].equals(stamp)) return (Segment) c[1];
    if (length > 64 + 24 + MAX_PATH + (long) MAX_ENTRIES * ENTRY_BYTES) return null;
    byte[] bytes = Files.readAllBytes(f);
    Segment s = parse(bytes, segment, dev, ino);
    if (s == null) Bridge.LOG.debug("kafkalog: batch summary " + f + " does not check; ignored");
    if (bytes.length == length) remember(f, stamp, s);
    return s;
  }

  /** What tells a file's version: its mtime, size and file key (a rename is a new inode). */
  private static Object stamp(BasicFileAttributes a) {
    return java.util.Arrays.asList(a.lastModifiedTime(), a.size(), a.fileKey());
  }

  private static void remember(Path f, Object stamp, Segment s) {
    if (CACHE.size() >= CACHE_FILES) CACHE.clear();
    if (s != null) CACHE.put(f, new Object[] {stamp, s});
    else CACHE.remove(f);
  }

  /** The entries of a summary file, or null if anything in it does not check. */
  static Segment parse(byte[] bytes, String segment, long dev, long ino) {
    ByteBuffer b = ByteBuffer.wrap(bytes);
    if (bytes.length < MAGIC.length + 8 + 8 + 4 + 24 + 4 + 4) return null;
    CRC32C crc = new CRC32C();
    crc.update(bytes, 0, bytes.length - 4);
    if ((int) crc.getValue() != b.getInt(bytes.length - 4)) return null;
    for (int i = 0; i < MAGIC.length; i++) if (b.get() != MAGIC[i]) return null;
    if (b.getLong() != dev || b.getLong() != ino) return null;
    int pathLen = b.getInt();
    if (pathLen < 0 || pathLen > MAX_PATH || pathLen > b.remaining() - 32) return null;
    byte[] p = new byte[pathLen];
    b.get(p);
    if (!new String(p, StandardCharsets.UTF_8).equals(segment)) return null;
    long[] stamp = {b.getLong(), b.getLong(), b.getLong()};
    int n = b.getInt();
    if (n < 0 || n > MAX_ENTRIES || (long) n * ENTRY_BYTES != b.remaining() - 4) return null;
    Segment s = new Segment(n);
    s.stamp = stamp[0] < 0 ? null : stamp;
    long endBefore = 0;
    for (int i = 0; i < n; i++) {
      s.pos[i] = b.getLong();
      s.minTs[i] = b.getLong();
      byte marked = b.get();
      if (marked != 0 && marked != 1) return null;
      s.marked[i] = marked == 1;
      b.get(s.headers, i * HEADER, HEADER);
      s.derive(i, crc);
      if (s.pos[i] < endBefore || s.size[i] < HEADER || s.size[i] > SplitReader.MAX_ENTRY || s.headers[i * HEADER + 16] != 2) {
        return null;
      }
      endBefore = s.pos[i] + s.size[i];
    }
    return s;
  }

  static byte[] format(Segment s, String segment, long dev, long ino) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(96 + segment.length() + s.n * ENTRY_BYTES);
    DataOutputStream o = new DataOutputStream(bytes);
    o.write(MAGIC);
    o.writeLong(dev);
    o.writeLong(ino);
    byte[] p = segment.getBytes(StandardCharsets.UTF_8);
    o.writeInt(p.length);
    o.write(p);
    for (int i = 0; i < 3; i++) o.writeLong(s.stamp == null ? -1 : s.stamp[i]);
    o.writeInt(s.n);
    for (int i = 0; i < s.n; i++) {
      o.writeLong(s.pos[i]);
      o.writeLong(s.minTs[i]);
      o.writeByte(s.marked[i] ? 1 : 0);
      o.write(s.headers, i * HEADER, HEADER);
    }
    o.flush();
    CRC32C crc = new CRC32C();
    byte[] body = bytes.toByteArray();
    crc.update(body);
    o.writeInt((int) crc.getValue());
    o.flush();
    return bytes.toByteArray();
  }

  /**
   * Adds what a split's read learned to the segment's summary file (read again under a lock of
   * this JVM, merged, written to a temporary file and renamed). Entries the new ones overlap in
   * a different way (the file was rewritten there) are dropped. Failures are ignored.
   * {@code logDir}: the log's directory, never written in (a cache directory set inside it
   * means no summaries).
   */
  static void record(Path dir, String segment, long dev, long ino, Learned learned, Path logDir, int maxFiles) {
    if ((learned.entries.isEmpty() && learned.confirmed.isEmpty()) || segment.length() > MAX_PATH) return;
    try {
      Path abs = dir.toAbsolutePath().normalize();
      if (logDir != null && abs.startsWith(logDir.toAbsolutePath().normalize())) return;
      Path f = file(dir, segment, dev, ino);
      synchronized (LOCKS.computeIfAbsent(f, k -> new Object())) {
        Segment old = null;
        try {
          old = read(f, segment, dev, ino);
        } catch (IOException | RuntimeException e) {
          old = null; // replaced
        }
        if (!learned.news(old)) return;
        Segment merged = merge(old, learned);
        byte[] bytes = format(merged, segment, dev, ino);
        Files.createDirectories(dir);
        Path tmp = dir.resolve(f.getFileName() + "." + java.util.UUID.randomUUID().toString().replace("-", "") + ".tmp");
        boolean created = !Files.exists(f);
        try {
          Files.write(tmp, bytes);
          Files.move(tmp, f, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } finally {
          Files.deleteIfExists(tmp);
        }
        remember(f, stamp(Files.readAttributes(f, BasicFileAttributes.class)), merged);
        if (created) prune(dir, maxFiles);
      }
    } catch (IOException | RuntimeException e) {
      Bridge.LOG.debug("kafkalog: batch summary for " + segment + " not written: " + e);
    }
  }

  /** new files this JVM made, by directory (a prune looks every maxFiles / 4 of them) */
  private static final ConcurrentHashMap<Path, java.util.concurrent.atomic.AtomicInteger> CREATED =
      new ConcurrentHashMap<>();

  /**
   * Keeps the directory bounded: at the first file this JVM creates there and every
   * {@code maxFiles / 4} after, if it holds more than {@code maxFiles} summaries, the least
   * recently written are deleted down to three quarters of that (segments long deleted, logs
   * read once); temporary files a crash left over ten minutes ago go too.
   */
  static void prune(Path dir, int maxFiles) {
    int made = CREATED.computeIfAbsent(dir, k -> new java.util.concurrent.atomic.AtomicInteger()).incrementAndGet();
    if (made != 1 && made % Math.max(1, maxFiles / 4) != 0) return;
    List<Object[]> sums = new ArrayList<>();
    long old = System.currentTimeMillis() - 600_000;
    try (java.nio.file.DirectoryStream<Path> files = Files.newDirectoryStream(dir)) {
      for (Path p : files) {
        String name = p.getFileName().toString();
        try {
          long mtime = Files.getLastModifiedTime(p).toMillis();
          if (name.endsWith(".sum")) sums.add(new Object[] {mtime, p});
          else if (name.endsWith(".tmp") && mtime < old) Files.deleteIfExists(p);
        } catch (IOException e) {
          // gone meanwhile
        }
      }
    } catch (IOException | RuntimeException e) {
      return;
    }
    if (sums.size() <= maxFiles) return;
    sums.sort((a, b) -> Long.compare((Long) a[0], (Long) b[0]));
    for (int i = 0; i < sums.size() - maxFiles * 3 / 4; i++) {
      Path p = (Path) sums.get(i)[1];
      try {
        Files.deleteIfExists(p);
        CACHE.remove(p);
      } catch (IOException e) {
        // another reader's
      }
    }
  }

  /**
   * old's entries the learned ones do not contradict, and the learned ones (a least timestamp
   * kept from old where the learned entry has the same header and none), by position; marked
   * under the learned stamp: the learned entries and the ones the read found equal, and old's
   * marked ones when old's stamp is the same (none when the segment was not settled).
   */
  static Segment merge(Segment old, Learned learned) {
    List<Entry> neu = learned.entries;
    boolean same = old != null && old.stampedAs(learned.stamp);
    java.util.Set<Long> confirmed = new java.util.HashSet<>(learned.confirmed);
    List<Entry> out = new ArrayList<>(neu.size() + (old == null ? 0 : old.n));
    int j = 0;
    int on = old == null ? 0 : old.n;
    int i = 0;
    while (i < on || j < neu.size()) {
      Entry e = j < neu.size() ? neu.get(j) : null;
      if (e != null && (i >= on || e.pos <= old.pos[i])) {
        // learned: drop the old entries it overlaps (kept its least timestamp when same header)
        long end = e.pos + e.size();
        while (i < on && old.pos[i] < end) {
          if (old.pos[i] == e.pos && e.minTs == UNKNOWN
              && java.util.Arrays.equals(old.headers, i * HEADER, i * HEADER + HEADER, e.header, 0, HEADER)) {
            e.minTs = old.minTs[i];
          }
          i++;
        }
        // and the last kept one, when it reaches into this
        while (!out.isEmpty() && out.get(out.size() - 1).pos + out.get(out.size() - 1).size() > e.pos) {
          out.remove(out.size() - 1);
        }
        out.add(new Entry(e.pos, e.header, e.minTs, learned.stamp != null));
        j++;
      } else {
        Entry last = out.isEmpty() ? null : out.get(out.size() - 1);
        if (last == null || last.pos + last.size() <= old.pos[i]) {
          boolean marked = learned.stamp != null && ((same && old.marked[i]) || confirmed.contains(old.pos[i]));
          out.add(new Entry(old.pos[i], java.util.Arrays.copyOfRange(old.headers, i * HEADER, i * HEADER + HEADER),
              old.minTs[i], marked));
        }
        i++;
      }
    }
    int n = Math.min(out.size(), MAX_ENTRIES);
    Segment s = new Segment(n);
    s.stamp = learned.stamp;
    CRC32C crc = new CRC32C();
    for (int k = 0; k < n; k++) {
      Entry e = out.get(k);
      s.pos[k] = e.pos;
      s.minTs[k] = e.minTs;
      s.marked[k] = e.marked;
      System.arraycopy(e.header, 0, s.headers, k * HEADER, HEADER);
      s.derive(k, crc);
    }
    return s;
  }
}
