// Command leakyapp serves Sidekiq's leaky-bucket example app, limited by
// the limiterd at -limiterd:
//
//	go run ./examples/leakyapp -limiterd 127.0.0.1:7070 -addr 127.0.0.1:9292
//	curl -i http://127.0.0.1:9292/api
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/examples/leakyapp/app"
)

func main() {
	target := flag.String("limiterd", "127.0.0.1:7070", "limiterd's gRPC address")
	addr := flag.String("addr", "127.0.0.1:9292", "address to serve on")
	timeout := flag.Duration("timeout", 100*time.Millisecond, "deadline of a call to limiterd")
	flag.Parse()
	c, err := client.New(*target, client.WithTimeout(*timeout),
		client.WithErrorHook(func(method string, err error) { log.Printf("limiterd %s: %v (admitted)", method, err) }))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	log.Printf("serving http://%s/api, limited by limiterd at %s", *addr, *target)
	srv := &http.Server{Addr: *addr, Handler: app.New(c), ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
