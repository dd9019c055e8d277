// kcp-go-echo: kcp-go (github.com/xtaci/kcp-go) with Reed-Solomon FEC on the W1 workload of
// Rally's transport shootout (docs/design.md). `rally-bench transport --mode real` builds it
// with the Go toolchain when one is present and runs both sides through its link emulator.
//
//	kcp-go-echo server                       prints "listening ADDR", echoes until stdin closes
//	kcp-go-echo client -server ADDR -seconds S
//	    sends a 400-byte payload every 1/60 s for S seconds, waits half a second for the last
//	    echoes, and prints one JSON line: the round trips (ms) and the payloads sent.
//
// Both sides: no delay mode (nodelay 1, interval 10 ms, fast resend 2, no congestion
// control), immediate acks, 10 data and 3 parity shards, no encryption.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	kcp "github.com/xtaci/kcp-go/v5"
)

const (
	payloadBytes = 400
	dataShards   = 10
	parityShards = 3
)

var sendInterval = time.Second / 60

func tune(s *kcp.UDPSession) {
	s.SetNoDelay(1, 10, 2, 1)
	s.SetACKNoDelay(true)
	s.SetWindowSize(256, 256)
	s.SetWriteDelay(false)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kcp-go-echo server | client -server ADDR -seconds S")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "server":
		err = serve()
	case "client":
		flags := flag.NewFlagSet("client", flag.ExitOnError)
		server := flags.String("server", "", "the address to send to")
		seconds := flags.Float64("seconds", 5, "how long to send")
		flags.Parse(os.Args[2:])
		err = client(*server, time.Duration(*seconds*float64(time.Second)))
	default:
		err = fmt.Errorf("unknown mode %q: use server or client", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kcp-go-echo:", err)
		os.Exit(1)
	}
}

func serve() error {
	listener, err := kcp.ListenWithOptions("127.0.0.1:0", nil, dataShards, parityShards)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", listener.Addr())
	go func() {
		for {
			s, err := listener.AcceptKCP()
			if err != nil {
				return
			}
			tune(s)
			go func() {
				buf := make([]byte, payloadBytes)
				for {
					if _, err := io.ReadFull(s, buf); err != nil {
						return
					}
					if _, err := s.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	// The parent closes our standard input (or dies) to stop us.
	io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	return listener.Close()
}

type report struct {
	RttsMs []float64 `json:"rtts_ms"`
	Sent   int       `json:"sent"`
}

func client(server string, duration time.Duration) error {
	s, err := kcp.DialWithOptions(server, nil, dataShards, parityShards)
	if err != nil {
		return err
	}
	tune(s)
	var mu sync.Mutex
	sentAt := map[uint32]time.Time{}
	var rtts []float64
	go func() {
		buf := make([]byte, payloadBytes)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			now := time.Now()
			index := binary.LittleEndian.Uint32(buf)
			mu.Lock()
			if at, ok := sentAt[index]; ok {
				rtts = append(rtts, float64(now.Sub(at).Nanoseconds())/1e6)
				delete(sentAt, index)
			}
			mu.Unlock()
		}
	}()
	start := time.Now()
	payload := make([]byte, payloadBytes)
	sent := 0
	for next := start; next.Sub(start) < duration; next = next.Add(sendInterval) {
		time.Sleep(time.Until(next))
		binary.LittleEndian.PutUint32(payload, uint32(sent))
		mu.Lock()
		sentAt[uint32(sent)] = time.Now()
		mu.Unlock()
		if _, err := s.Write(payload); err != nil {
			return err
		}
		sent++
	}
	// The last echoes, or half a second.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); {
		mu.Lock()
		done := len(sentAt) == 0
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	s.Close()
	return json.NewEncoder(os.Stdout).Encode(report{RttsMs: rtts, Sent: sent})
}
