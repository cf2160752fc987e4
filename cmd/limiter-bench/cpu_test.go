package main

import "testing"

func TestParseStat(t *testing.T) {
	// A command name with spaces and a ')' of its own.
	line := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 31 0 0 20 0 9 0 123 456 789\n"
	got, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := 281 * clockTick; got != want {
		t.Errorf("parseStat = %s, want %s", got, want)
	}
	if _, err := parseStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("short line: no error")
	}
}
