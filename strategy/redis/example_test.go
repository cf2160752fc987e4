package redis_test

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	redisstore "github.com/limiterd/limiterd/strategy/redis"
)

// A store's options are decoded over DefaultConfig, validated, and opened;
// Open does not contact the server, so it succeeds while Redis is down.
func ExampleOpen() {
	cfg := redisstore.DefaultConfig()
	src := `
addrs: ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]
read_timeout: 500ms
write_timeout: 0.5
key_prefix: "rl"
`
	if err := yaml.NewDecoder(strings.NewReader(src)).Decode(&cfg); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.ReadTimeout, cfg.WriteTimeout, cfg.DialTimeout)

	cfg.DB = 1
	fmt.Println(cfg.Validate())

	cfg.DB = 0
	s, err := redisstore.Open(cfg)
	fmt.Println(err)
	_ = s.Close()
	// Output:
	// 500ms 500ms 5s
	// redis: db: a cluster has only db 0, got 1
	// <nil>
}
