// Command podprobe is the program TestKubeCluster runs in a pod: it dials
// the TCP address of its one argument, sends "hello from <hostname>\n",
// reads one line back, prints what it sent and received, and exits 0 (1,
// with the error, if any step fails).
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: podprobe host:port")
		os.Exit(2)
	}
	if err := probe(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "podprobe:", err)
		os.Exit(1)
	}
}

func probe(addr string) error {
	host, _ := os.Hostname()
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	msg := "hello from " + host
	if _, err := fmt.Fprintln(c, msg); err != nil {
		return err
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	fmt.Printf("sent %q from %s to %s, got %q\n", msg, c.LocalAddr(), addr, reply)
	return nil
}
