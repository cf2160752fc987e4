package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/limiterd/limiterd/api/proto/limiter/admin/v1"
	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// TestAdminGRPC: the admin API over gRPC on the admin listener adds,
// changes and removes namespaces, keeps the counts of a namespace that
// stays through a change of its window sizes, refuses a bad change naming
// its fields, and reloads the file.
func TestAdminGRPC(t *testing.T) {
	grpcAddr, httpAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	path := configFile(t, grpcAddr, httpAddr, "files")
	d := startRun(t, []string{"--config", path, "--admin-addr", adminAddr}, nil)
	conn := d.dial(t, grpcAddr)
	api := limiterv1.NewRateLimiterClient(conn)
	aconn, err := grpc.NewClient(adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer aconn.Close()
	admin := adminv1.NewAdminClient(aconn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	local := -1.0
	put := func(name string, sizes ...time.Duration) (*adminv1.ChangeResponse, error) {
		ns := &adminv1.Namespace{Name: name, SyncRate: &local}
		for _, s := range sizes {
			ns.WindowSizes = append(ns.WindowSizes, durationpb.New(s))
		}
		return admin.PutNamespace(ctx, &adminv1.PutNamespaceRequest{Namespace: ns}, grpc.WaitForReady(true))
	}
	if resp, err := put("users", time.Minute); err != nil || !strings.Contains(resp.GetSummary(), "added [users]") {
		t.Fatalf("add: %v, %v", resp, err)
	}
	for range 3 {
		if _, err := api.Increment(ctx, &limiterv1.IncrementRequest{Namespace: "users", Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if resp, err := put("users", time.Minute, time.Hour); err != nil || !strings.Contains(resp.GetSummary(), "changed [users]") {
		t.Fatalf("change: %v, %v", resp, err)
	}
	rates, err := api.SlidingWindow(ctx, &limiterv1.SlidingWindowRequest{Namespace: "users", Key: "k", WindowSize: durationpb.New(time.Minute)})
	if err != nil || rates.GetRates()[0].GetRate() < 2.9 {
		t.Errorf("after the change the minute's count is %v (%v), want the 3 hits counted before", rates.GetRates(), err)
	}
	list, err := admin.ListNamespaces(ctx, &adminv1.ListNamespacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ns := range list.GetNamespaces() {
		names = append(names, fmt.Sprintf("%s:%d", ns.GetName(), len(ns.GetWindowSizes())))
	}
	if got := strings.Join(names, " "); got != "files:2 users:2" {
		t.Errorf("list = %s", got)
	}
	_, err = put("bad", 0)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "window_sizes") {
		t.Errorf("a bad namespace: %v, want INVALID_ARGUMENT naming window_sizes", err)
	}
	if _, err := admin.DeleteNamespace(ctx, &adminv1.DeleteNamespaceRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("delete of an unknown namespace: %v, want NOT_FOUND", err)
	}
	if _, err := admin.Sync(ctx, &adminv1.NamespaceRequest{Name: "users"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("sync of a local namespace: %v, want FAILED_PRECONDITION", err)
	}
	if resp, err := admin.DeleteNamespace(ctx, &adminv1.DeleteNamespaceRequest{Name: "users"}); err != nil || !strings.Contains(resp.GetSummary(), "removed [users]") {
		t.Fatalf("delete: %v, %v", resp, err)
	}
	if hasNamespace(t, conn, "users") {
		t.Error("a removed namespace still serves")
	}
	put("again", time.Second)
	if resp, err := admin.Reload(ctx, &adminv1.ReloadRequest{}); err != nil || !strings.Contains(resp.GetSummary(), "removed [again]") {
		t.Errorf("reload: %v, %v; want the file's namespaces back", resp, err)
	}
}

// TestAdminGRPCPolicies: a namespace's policies and shadow mode change
// through the gRPC admin API as its other fields do: the next Allow
// naming the policy is decided by its new limits, ListNamespaces gives
// them back as put (every kind of limit), and a bad policy is refused
// naming its field.
func TestAdminGRPCPolicies(t *testing.T) {
	grpcAddr, httpAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	path := configFile(t, grpcAddr, httpAddr, "files")
	d := startRun(t, []string{"--config", path, "--admin-addr", adminAddr}, nil)
	api := limiterv1.NewRateLimiterClient(d.dial(t, grpcAddr))
	aconn, err := grpc.NewClient(adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer aconn.Close()
	admin := adminv1.NewAdminClient(aconn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	local, amount := -1.0, 1.0
	login := func(limit float64) *adminv1.Policy {
		return &adminv1.Policy{Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(time.Hour), Limit: limit}}}
	}
	buckets := &adminv1.Policy{Shadow: true, Limits: []*limiterv1.Limit{
		{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 2, RefillTime: durationpb.New(time.Minute), RefillAmount: &amount, Strict: true}}},
		{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 3, Interval: durationpb.New(time.Minute), WaitTimeout: durationpb.New(time.Second)}}},
		{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: durationpb.New(time.Hour), Limit: 4}}},
	}}
	put := func(policies map[string]*adminv1.Policy) (*adminv1.ChangeResponse, error) {
		ns := &adminv1.Namespace{Name: "users", SyncRate: &local, WindowSizes: []*durationpb.Duration{durationpb.New(time.Hour)}, Policies: policies}
		return admin.PutNamespace(ctx, &adminv1.PutNamespaceRequest{Namespace: ns}, grpc.WaitForReady(true))
	}
	allowed := func() bool {
		t.Helper()
		resp, err := api.Allow(ctx, &limiterv1.AllowRequest{Namespace: "users", Key: "k", Policy: "login"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAllowed()
	}
	if _, err := put(map[string]*adminv1.Policy{"login": login(1), "buckets": buckets}); err != nil {
		t.Fatal(err)
	}
	if !allowed() || allowed() {
		t.Fatal("policy login of 1 per hour: want the first call admitted, the second refused")
	}
	list, err := admin.ListNamespaces(ctx, &adminv1.ListNamespacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range list.GetNamespaces() {
		if ns.GetName() != "users" {
			continue
		}
		if got := ns.GetPolicies()["buckets"]; !proto.Equal(got, buckets) {
			t.Errorf("listed policy buckets = %v, want %v", got, buckets)
		}
	}
	if _, err := put(map[string]*adminv1.Policy{"login": login(2)}); err != nil {
		t.Fatal(err)
	}
	if !allowed() || allowed() {
		t.Error("policy login changed to 2 per hour: want one more call admitted, then refused")
	}
	_, err = put(map[string]*adminv1.Policy{"login": {Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(time.Minute), Limit: 1}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "policies.login.limits[0].window_size") {
		t.Errorf("a policy of a window size the namespace lacks: %v, want INVALID_ARGUMENT naming it", err)
	}
}
