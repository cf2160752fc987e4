package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ),
// 100 Hz on every Linux architecture Go supports; Go cannot ask sysconf
// without cgo.
const clockTick = 10 * time.Millisecond

// cpuSample is CPU time used so far by the server processes and by this
// one.
type cpuSample struct {
	server, self time.Duration
	ok, selfOK   bool // whether they could be read (Linux, processes alive)
}

func sampleCPU(pids []int) cpuSample {
	var s cpuSample
	var err error
	s.self, err = procCPU("self")
	s.selfOK = err == nil
	s.ok = len(pids) > 0
	for _, pid := range pids {
		d, err := procCPU(strconv.Itoa(pid))
		if err != nil {
			s.ok = false
			continue
		}
		s.server += d
	}
	return s
}

// procCPU returns utime+stime of /proc/<pid>/stat.
func procCPU(pid string) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStat(data)
}

// parseStat reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may itself hold spaces and parentheses, so fields are counted from the
// last ')'.
func parseStat(data []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name in %q", data)
	}
	f := bytes.Fields(data[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return time.Duration(utime+stime) * clockTick, nil
}
