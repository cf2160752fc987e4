package resp_test

import (
	"context"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/front/resp"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// Smyte's transcript through any Redis client: the front on a loopback
// port, go-redis calling RL.REDUCE TwoPerMin 2 60 three times.
func Example() {
	n, _ := node.New([]node.Config{node.DefaultConfig()}, nil)
	svc, _ := service.New(n)
	front, _ := resp.New(svc, resp.DefaultConfig(), nil, nil)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go front.Serve(ln)
	defer front.Shutdown(context.Background())

	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
	defer rdb.Close()
	for range 3 {
		tokens, err := rdb.Do(context.Background(), "RL.REDUCE", "TwoPerMin", 2, 60).Int64()
		fmt.Println(tokens, err)
	}
	// Output:
	// 2 <nil>
	// 1 <nil>
	// 0 <nil>
}
