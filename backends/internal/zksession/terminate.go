package zksession

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrSessionGone is Terminate's error for a session the server no longer
// has.
var ErrSessionGone = errors.New("the session no longer exists")

// Terminate ends session id (password passwd) from a connection of its
// own, through the same dialer, to the first server that answers: it
// connects with the session's credentials, which the server accepts as the
// same client reconnecting (it drops the holder's own connection), and asks
// to close the session. The server removes the session's ephemeral znodes
// before it answers. It returns ErrSessionGone (wrapped) if the session had
// already ended.
//
// The holder's client reconnects as soon as its connection is dropped, and
// the server then drops this one in turn: Terminate sends its connect and
// close requests in one write, and tries again (up to five times) when its
// connection is dropped before the answer.
func (s *Session) Terminate(ctx context.Context, id int64, passwd []byte) error {
	var last error
	for try := 0; try < 5; try++ {
		for _, addr := range s.opts.Servers {
			err := s.terminateOn(ctx, addr, id, passwd)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, ErrSessionGone) && try > 0:
				return nil // closed by the try before, whose answer was lost
			case errors.Is(err, ErrSessionGone):
				return err
			case ctx.Err() != nil:
				return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
			}
			last = err
		}
	}
	return last
}

func (s *Session) terminateOn(ctx context.Context, addr string, id int64, passwd []byte) error {
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	c, err := s.rawDial("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	// ConnectRequest: protocol version, last zxid seen, timeout, session
	// id, password; then RequestHeader: xid 1, type closeSession (-11).
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(s.opts.Timeout.Milliseconds()))
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	closeSession := int32(-11)
	out := append(frame(req), frame(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 1), uint32(closeSession)))...)
	if _, err := c.Write(out); err != nil {
		return err
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("connect response: %w", err)
	}
	if len(resp) < 16 || int64(binary.BigEndian.Uint64(resp[8:])) != id {
		return fmt.Errorf("session 0x%x: %w", id, ErrSessionGone)
	}
	// ReplyHeader: xid, zxid, err; pings' and notifications' replies
	// (negative xids) are skipped.
	for {
		r, err := readFrame(c)
		if err != nil {
			return fmt.Errorf("close session 0x%x: %w", id, err)
		}
		if len(r) >= 16 && int32(binary.BigEndian.Uint32(r)) == 1 {
			if code := int32(binary.BigEndian.Uint32(r[12:])); code != 0 {
				return fmt.Errorf("close session 0x%x: server error %d", id, code)
			}
			return nil
		}
	}
}

// frame prefixes b with its length, as every ZooKeeper packet is.
func frame(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }

func readFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// End terminates session id if it is still the client's (see Terminate).
func (s *Session) End(ctx context.Context, id int64) error {
	cur, passwd := s.Credentials()
	if cur != id {
		return fmt.Errorf("terminate session 0x%x: the client has moved to session 0x%x: %w", id, cur, ErrSessionGone)
	}
	if err := s.Terminate(ctx, id, passwd); err != nil {
		return fmt.Errorf("terminate session 0x%x: %w", id, err)
	}
	return nil
}
