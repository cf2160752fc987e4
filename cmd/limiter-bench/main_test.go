package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-targets", " a:1, b:2 ,", "-call", "allow-batch", "-pids", "12,34", "-key-prefix", "p-"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.targets, "|"); got != "a:1|b:2" {
		t.Errorf("targets = %q, want a:1|b:2", got)
	}
	if len(c.pids) != 2 || c.pids[0] != 12 || c.pids[1] != 34 {
		t.Errorf("pids = %v, want [12 34]", c.pids)
	}
	if c.call != callAllowBatch || c.keyPrefix != "p-" || c.batch != 100 || c.window != time.Second {
		t.Errorf("config = %+v", c)
	}
	for _, bad := range [][]string{
		{"-targets", ""},
		{"-call", "nope"},
		{"-c", "0"},
		{"-rate", "-1"},
		{"-dist", "normal"},
		{"-dist", "zipf", "-zipf-s", "1"},
		{"-window", "0s"},
		{"-pids", "x"},
		{"-ca-file", "ca.crt", "-cert-file", "c.crt"},
		{"-cert-file", "c.crt", "-key-file", "c.key"},
		{"extra"},
	} {
		if _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"--help"}, &bytes.Buffer{}, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-targets", "-call", "-rate", "-conns", "-dist", "-limit", "-batch", "-pids", "-at"} {
		if !strings.Contains(stderr.String(), f) {
			t.Errorf("--help does not document %s", f)
		}
	}
}

func TestSchedule(t *testing.T) {
	// Scheduled times are start + i/rate, each sent once, in order.
	start := time.Now()
	out, stop := make(chan time.Time), make(chan struct{})
	done := make(chan struct{})
	go func() { schedule(start, 10_000, out, stop); close(done) }()
	for i := range 50 {
		got := <-out
		if want := start.Add(time.Duration(i) * 100 * time.Microsecond); !got.Equal(want) {
			t.Fatalf("call %d scheduled at %s, want %s", i, got.Sub(start), want.Sub(start))
		}
	}
	close(stop)
	<-done
}
