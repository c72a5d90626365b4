package kafkalog.jvm;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The Python planner's answers about a batch read (its schema at {@code load()}, a user schema's
 * columns, a plan), kept in the driver JVM while every file of the log they were made from stays
 * as it was: a warm query over a log nobody writes costs no round trip to the planner (6-28 ms
 * of a 60 ms count; issue 31).
 *
 * <p>"As it was": the same names, and for each file and directory under the read's path (the
 * path, its entries, their entries; with a partition directory as the path, its data
 * directory's entries too, whose checkpoints the log reads) the same device, inode, size, mtime
 * and ctime, as taken just <em>before</em> the question was asked: a change made while the
 * planner answered shows at the next look. An append changes a segment's size and times, a roll
 * or a deletion a directory's entries and times, a rewrite (the cleaner's swap, a checkpoint's
 * rename) an inode, a byte written in place and the mtime put back a ctime. Timestamps are only
 * as fine as the file system's clock, so an answer is kept only when every time seen is older
 * than {@link #SETTLE_CONF} (2 s): a write right after the look, in the same tick, cannot leave
 * a settled file's times unchanged (the same reasoning as git's racy index entries). A live log
 * being written to is therefore asked every time, as before. Streams are never kept (their
 * state is the planner's), nor remote paths (no ctime), nor errors (asked again each time, so
 * said each time); a kept answer's log lines (failOnDataLoss=false's warnings) are said again.
 *
 * <p>A look covers what the answer depends on ({@link Reach}): a plan every file; the schema at
 * {@code load()} the path and its entries (~15 stats instead of ~310 for the bench's data
 * directory); a user schema's columns nothing, being the options' alone. Each look costs
 * ~1-2.5 ms of a ~40 ms kept count, so a query now takes one full look, not three.
 */
final class KeptAnswers {
  private KeptAnswers() {}

  /** conf: false asks the planner every time */
  static final String CONF = "spark.kafkalog.jvm.planCache";
  /** conf: how old (ms) every file time must be for an answer to be kept (tests shorten it) */
  static final String SETTLE_CONF = "spark.kafkalog.jvm.planCache.settleMs";
  static final long SETTLE_MS = 2000;
  /** answers kept at most (the least recently used go) */
  static final int MAX = 64;
  /** files a look stats at most (a larger tree is asked every time) */
  static final int MAX_FILES = 100_000;

  static final class Kept {
    final Look look;
    final JsonNode answer;
    /** what was computed from this answer over the same files (a warm count's rows), by what */
    final java.util.concurrent.ConcurrentHashMap<String, Object> derived = new java.util.concurrent.ConcurrentHashMap<>();

    Kept(Look look, JsonNode answer) {
      this.look = look;
      this.answer = answer;
    }
  }

  private static final Map<String, Kept> KEPT = new LinkedHashMap<>(16, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, Kept> eldest) {
      return size() > MAX;
    }
  };

  /** by path: until when (ms) a look cannot be settled (its latest unsettled time + the margin,
   * at most the margin from when it was taken) */
  private static final Map<String, Long> UNSETTLED = new LinkedHashMap<>(16, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, Long> eldest) {
      return size() > MAX;
    }
  };

  /**
   * What an answer depends on besides the question (its options): how much of the files under
   * the path a look covers before a kept answer is used.
   */
  enum Reach {
    /** the options alone (a user schema's columns: {@code parse_read_options} and
     * {@code choose_columns} read no file), kept by the question alone */
    OPTIONS,
    /** the path and its entries (the schema at {@code load()}: {@code check_at_load} lists the
     * path's partition directories, names and kinds, and opens nothing): any entry added,
     * removed or renamed changes the path's times, one replaced its identity */
    LISTING,
    /** every file under the path (a plan, and a count made from it) */
    FILES
  }

  /** An answer, and the entry keeping it (null: not kept, so nothing derived from it is). */
  static final class Asked {
    final JsonNode answer;
    final Kept kept;

    Asked(JsonNode answer, Kept kept) {
      this.answer = answer;
      this.kept = kept;
    }
  }

  /** {@link Bridge#ask}, or the answer kept for the same question over the same files. */
  static JsonNode ask(ObjectNode request, Map<String, String> options) {
    return asked(request, options, Reach.FILES).answer;
  }

  /** {@link #ask} for an answer that depends on no more than {@code reach}. */
  static JsonNode ask(ObjectNode request, Map<String, String> options, Reach reach) {
    return asked(request, options, reach).answer;
  }

  /** The settle margin (ms): the conf's, else {@link #SETTLE_MS}. */
  static long settleMs() {
    String s = Bridge.conf(SETTLE_CONF);
    if (s == null) return SETTLE_MS;
    try {
      return Math.max(0, Long.parseLong(s.trim()));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("kafkalog: " + SETTLE_CONF + " must be a number of milliseconds", e);
    }
  }

  /** {@link #ask}, with the entry the answer is kept in: what is derived from the answer and
   * the files (a count) may be kept there, and goes with it when the files change. The look
   * is taken before the question, so before anything derived is computed. */
  static Asked asked(ObjectNode request, Map<String, String> options) {
    return asked(request, options, Reach.FILES);
  }

  private static Asked asked(ObjectNode request, Map<String, String> options, Reach reach) {
    String path = KafkaLogScan.anyCase(options, "path");
    if (path == null || path.isEmpty() || path.contains("://") || "false".equalsIgnoreCase(Bridge.conf(CONF))) {
      return new Asked(Bridge.ask(request), null);
    }
    long settle = settleMs();
    String key;
    try {
      key = reach + " " + Bridge.JSON.writeValueAsString(request);
    } catch (JsonProcessingException e) {
      return new Asked(Bridge.ask(request), null);
    }
    if (reach == Reach.OPTIONS) {
      Kept k;
      synchronized (KEPT) {
        k = KEPT.get(key);
      }
      if (k != null) {
        Bridge.say(k.answer);
        return new Asked(k.answer, k);
      }
      JsonNode answer = Bridge.ask(request);
      k = new Kept(null, answer);
      synchronized (KEPT) {
        KEPT.put(key, k);
      }
      return new Asked(answer, k);
    }
    String where = reach + " " + path;
    Long until;
    synchronized (KEPT) {
      until = UNSETTLED.get(where);
    }
    if (until != null && System.currentTimeMillis() < until) {
      // a file under the path was written within the settle margin at the last look: a look
      // now cannot be settled (times only grow), so none is taken (a live log: ~1 ms a question)
      return new Asked(Bridge.ask(request), null);
    }
    Look look = Look.of(Paths.get(path), settle, reach == Reach.FILES);
    synchronized (KEPT) {
      if (look != null && !look.settled) UNSETTLED.put(where, Math.min(look.latestMs, System.currentTimeMillis()) + settle);
      else UNSETTLED.remove(where);
    }
    if (look != null) {
      Kept k;
      synchronized (KEPT) {
        k = KEPT.get(key);
      }
      if (k != null && k.look.equals(look)) {
        Bridge.say(k.answer);
        return new Asked(k.answer, k);
      }
    }
    JsonNode answer = Bridge.ask(request);
    Kept k = look != null && look.settled ? new Kept(look, answer) : null;
    synchronized (KEPT) {
      if (k != null) KEPT.put(key, k);
      else KEPT.remove(key);
    }
    return new Asked(answer, k);
  }

  /**
   * What the files under a path are: names, and (device, inode, size, mtime ns, ctime ns) of
   * each; {@code settled} when every time is older than the settle margin.
   */
  static final class Look {
    final List<String> names = new ArrayList<>();
    long[] values = new long[256];
    int n;
    boolean settled = true;
    /** the latest time (ms) of a file found unsettled */
    long latestMs = Long.MIN_VALUE;
    private final long before;

    private Look(long settleMs) {
      before = TimeUnit.MILLISECONDS.toNanos(System.currentTimeMillis() - settleMs);
    }

    /** The look at {@code root} ({@code deep}: its entries' entries too, and a partition
     * directory's data directory; else the root and its entries), or null (gone, unreadable,
     * too large: ask the planner). */
    static Look of(Path root, long settleMs, boolean deep) {
      Look look = new Look(settleMs);
      try {
        if (!look.add(root, "")) return null;
        boolean partition = false;
        for (Path e : sorted(root)) {
          boolean dir = look.add(e, e.getFileName().toString(), deep);
          if (!deep) {
            // the listing only: an entry's name (the root's times change with any entry
            // added, removed or renamed), its identity and kind (a symlink's target too)
          } else if (dir) {
            for (Path f : sorted(e)) look.add(f, e.getFileName() + "/" + f.getFileName());
          } else if (e.getFileName().toString().endsWith(".log")) {
            partition = true;
          }
          if (look.names.size() > MAX_FILES) return null;
        }
        Path parent = root.toAbsolutePath().normalize().getParent();
        if (deep && partition && parent != null) {
          // a partition directory read alone: its data directory's checkpoints count too
          look.add(parent, "..");
          for (Path e : sorted(parent)) {
            if (!Files.isDirectory(e)) look.add(e, "../" + e.getFileName());
            if (look.names.size() > MAX_FILES) return null;
          }
        }
      } catch (IOException | RuntimeException e) {
        return null;
      }
      return look;
    }

    private static List<Path> sorted(Path dir) throws IOException {
      List<Path> out = new ArrayList<>();
      try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir)) {
        for (Path p : entries) out.add(p);
      }
      Collections.sort(out);
      return out;
    }

    private boolean add(Path p, String name) throws IOException {
      return add(p, name, true);
    }

    /** One entry's identity, size and times ({@code times}; else its identity and kind);
     * whether it is a directory. */
    private boolean add(Path p, String name, boolean times) throws IOException {
      if (!times) {
        Map<String, Object> a = Files.readAttributes(p, "unix:dev,ino,isDirectory");
        boolean dir = (Boolean) a.get("isDirectory");
        if (n + 5 > values.length) values = Arrays.copyOf(values, values.length * 2);
        values[n++] = ((Number) a.get("dev")).longValue();
        values[n++] = ((Number) a.get("ino")).longValue();
        values[n++] = dir ? 1 : 0;
        values[n++] = 0;
        values[n++] = 0;
        names.add(name);
        return dir;
      }
      Map<String, Object> a = Files.readAttributes(p, "unix:dev,ino,size,lastModifiedTime,ctime,isDirectory");
      long mtime = ((FileTime) a.get("lastModifiedTime")).to(TimeUnit.NANOSECONDS);
      long ctime = ((FileTime) a.get("ctime")).to(TimeUnit.NANOSECONDS);
      if (mtime >= before || ctime >= before) {
        settled = false;
        latestMs = Math.max(latestMs, TimeUnit.NANOSECONDS.toMillis(Math.max(mtime, ctime)));
      }
      if (n + 5 > values.length) values = Arrays.copyOf(values, values.length * 2);
      values[n++] = ((Number) a.get("dev")).longValue();
      values[n++] = ((Number) a.get("ino")).longValue();
      values[n++] = ((Number) a.get("size")).longValue();
      values[n++] = mtime;
      values[n++] = ctime;
      names.add(name);
      return (Boolean) a.get("isDirectory");
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof Look)) return false;
      Look l = (Look) o;
      return n == l.n && Arrays.equals(values, 0, n, l.values, 0, n) && names.equals(l.names);
    }

    @Override
    public int hashCode() {
      return names.hashCode();
    }
  }
}
