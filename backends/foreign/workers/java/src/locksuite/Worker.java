package locksuite;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * The worker side of locksuite's worker protocol (docs/protocol.md), for Java. A worker extends it with its
 * lock's acquire and release and calls {@link #run()}; requests are handled one at a time, in order, on the thread
 * that calls run. {@link #lost} may be called from any thread.
 */
public abstract class Worker {
  public static final int PROTOCOL = 1;

  /** An error reply: code is one of the protocol's; definite promises that the operation did not happen. */
  public static class Failure extends Exception {
    final String code;
    final boolean definite;

    public Failure(String code, String text, boolean definite) {
      super(text);
      this.code = code;
      this.definite = definite;
    }
  }

  /** What a grant is called, and its fencing token (0 without the fence capability). */
  public record Grant(String lease, long fence) {}

  /** The ttl_ms and expiry_ms of init_ok. */
  public record Ttl(long ttlMs, long expiryMs) {}

  private final ObjectMapper json = new ObjectMapper();
  private final PrintStream out;

  protected Worker() {
    // stdout is the protocol's alone: whatever else writes to System.out goes to stderr.
    out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    System.setOut(System.err);
  }

  public abstract String library();

  public abstract String version();

  public abstract List<String> capabilities();

  public abstract Ttl init(JsonNode msg) throws Exception;

  public abstract Grant acquire(long timeoutMs) throws Exception;

  /** Releases lease if, and only if, it is still this lease's; returns whether it was. */
  public abstract boolean release(String lease) throws Exception;

  public void cleanup() throws Exception {}

  public void close() throws Exception {}

  /** Sends a lost notice: the library said that lease is gone. */
  public void lost(String lease, String text) {
    ObjectNode n = json.createObjectNode().put("type", "lost").put("lease", lease).put("text", text);
    send(n);
  }

  private synchronized void send(ObjectNode n) {
    out.print(n.toString() + "\n");
    out.flush();
  }

  private ObjectNode handle(JsonNode msg) throws Exception {
    ObjectNode r = json.createObjectNode();
    switch (msg.path("type").asText()) {
      case "init" -> {
        if (msg.path("protocol").asInt() != PROTOCOL) {
          throw new Failure("unsupported", "protocol " + msg.path("protocol") + ": this worker speaks " + PROTOCOL, true);
        }
        Ttl t = init(msg);
        r.put("type", "init_ok").put("library", library()).put("version", version())
            .put("runtime", "Java " + System.getProperty("java.version") + " (" + System.getProperty("java.home") + ")")
            .put("ttl_ms", t.ttlMs()).put("expiry_ms", t.expiryMs());
        capabilities().forEach(r.putArray("capabilities")::add);
      }
      case "acquire" -> {
        Grant g = acquire(msg.path("timeout_ms").asLong());
        r.put("type", "acquire_ok").put("lease", g.lease()).put("fence", g.fence());
      }
      case "release" -> r.put("type", "release_ok").put("held", release(msg.path("lease").asText()));
      case "cleanup" -> {
        cleanup();
        r.put("type", "cleanup_ok");
      }
      case "close" -> {
        close();
        r.put("type", "close_ok");
      }
      default -> throw new Failure("unsupported", "request type " + msg.path("type"), true);
    }
    return r;
  }

  /** Serves requests from standard input until it ends, then exits 0. */
  public void run() throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      JsonNode msg;
      try {
        msg = json.readTree(line);
      } catch (Exception e) {
        send(json.createObjectNode().put("type", "error").put("code", "malformed").put("definite", true).put("text", e.getMessage()));
        continue;
      }
      ObjectNode r;
      try {
        r = handle(msg);
      } catch (Failure f) {
        r = json.createObjectNode().put("type", "error").put("code", f.code).put("definite", f.definite).put("text", f.getMessage());
      } catch (Exception e) {
        e.printStackTrace();
        r = json.createObjectNode().put("type", "error").put("code", "crash").put("definite", false).put("text", e.toString());
      }
      r.set("in_reply_to", msg.get("id"));
      send(r);
    }
    System.exit(0);
  }
}
