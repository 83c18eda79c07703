package nodes

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"syscall"
)

func itoa(i int) string { return strconv.Itoa(i) }

func fmtSscan(s string, a ...any) (int, error) { return fmt.Sscan(s, a...) }

func netipAddrPort(n *Node, port uint16) netip.AddrPort { return netip.AddrPortFrom(n.Addr(), port) }

func errorsIs(err error) bool { return errors.Is(err, ErrNoPrivilege) }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func nobody() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}
