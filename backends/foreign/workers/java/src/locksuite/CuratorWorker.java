package locksuite;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.KeeperException;

/**
 * Apache Curator's InterProcessMutex, as it ships, for locksuite. The lock is an ephemeral sequential node under
 * /key, which lives as long as the client's session (the lease is the session timeout). The fence is the node's
 * sequence number plus one. Curator's advice is followed: on SUSPENDED or LOST the holder must assume the lock is
 * gone, so either state sends a lost notice for the lease held.
 */
public final class CuratorWorker extends Worker {
  /** InterProcessMutex with its lock node's path in reach (getLockPath is protected). */
  static final class Mutex extends InterProcessMutex {
    Mutex(CuratorFramework client, String path) {
      super(client, path);
    }

    String node() {
      return getLockPath();
    }
  }

  private CuratorFramework zk;
  private String path;
  private volatile String heldLease; // the lease held, for the listener
  private Mutex mutex;
  private String node;
  private int n;

  @Override
  public String library() {
    return "curator";
  }

  /** curator-recipes' version, from its jar's Maven metadata (Debian's manifest has none). */
  @Override
  public String version() {
    try (InputStream in = InterProcessMutex.class.getResourceAsStream(
        "/META-INF/maven/org.apache.curator/curator-recipes/pom.properties")) {
      Properties p = new Properties();
      p.load(in);
      return p.getProperty("version", "unknown");
    } catch (Exception e) {
      return "unknown";
    }
  }

  @Override
  public List<String> capabilities() {
    return List.of("fence", "ttl", "lost", "cleanup");
  }

  @Override
  public Ttl init(JsonNode msg) throws Exception {
    path = "/" + msg.path("key").asText();
    int lease = msg.path("lease_ms").asInt();
    CuratorFrameworkFactory.Builder b = CuratorFrameworkFactory.builder().connectString(msg.path("url").asText())
        .sessionTimeoutMs(lease).connectionTimeoutMs(5000).retryPolicy(new RetryNTimes(3, 50));
    String user = msg.path("username").asText();
    if (!user.isEmpty()) {
      b.authorization("digest", (user + ":" + msg.path("password").asText()).getBytes(StandardCharsets.UTF_8));
    }
    zk = b.build();
    zk.getConnectionStateListenable().addListener((c, state) -> {
      String held = heldLease;
      if (held != null && (state == ConnectionState.SUSPENDED || state == ConnectionState.LOST)) {
        heldLease = null; // once per lease
        lost(held, "curator: connection state " + state);
      }
    });
    zk.start();
    if (!zk.blockUntilConnected(10, TimeUnit.SECONDS)) {
      throw new Failure("unavailable", "curator: not connected to " + msg.path("url").asText() + " in 10 s", false);
    }
    // The server expires a session on the first tick after its timeout: a tick is at most half of it.
    return new Ttl(lease, lease * 3L / 2);
  }

  @Override
  public Grant acquire(long timeoutMs) throws Exception {
    Mutex m = new Mutex(zk, path);
    boolean got;
    try {
      got = m.acquire(timeoutMs, TimeUnit.MILLISECONDS);
    } catch (KeeperException e) {
      throw new Failure("unavailable", "curator: " + e, false);
    }
    if (!got) {
      throw new Failure("timeout", "curator: not acquired within " + timeoutMs + " ms", false);
    }
    mutex = m;
    node = m.node();
    String lease = "c" + ++n;
    heldLease = lease;
    return new Grant(lease, Long.parseLong(node.substring(node.length() - 10)) + 1);
  }

  @Override
  public boolean release(String lease) throws Exception {
    if (mutex == null || !lease.equals("c" + n)) {
      return false; // released before
    }
    heldLease = null;
    Mutex m = mutex;
    mutex = null;
    boolean mine;
    try {
      // The node is gone if the session expired meanwhile: the lock was no longer this lease's.
      mine = zk.checkExists().forPath(node) != null;
    } catch (Exception e) {
      mine = false;
    }
    try {
      m.release();
    } catch (Exception e) {
      if (mine) {
        throw new Failure("unavailable", "curator: release: " + e, false);
      }
    }
    return mine;
  }

  @Override
  public void cleanup() throws Exception {
    try {
      zk.delete().forPath(path);
    } catch (KeeperException.NoNodeException | KeeperException.NotEmptyException e) {
      // nothing to remove, or not only ours
    }
  }

  @Override
  public void close() {
    heldLease = null;
    zk.close();
  }

  public static void main(String[] args) throws Exception {
    System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    new CuratorWorker().run();
  }
}
