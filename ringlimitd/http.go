package main

import (
	"errors"
	"io"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/rls"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxBody bounds a request's body, on /json and on gRPC.
const maxBody = 1 << 20

func (d *daemon) handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "ok\n") })
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !d.n.Ready() || d.svc.Config() == nil {
			http.Error(rw, "not ready: not joined yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(rw, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("POST /json", jsonHandler(d.svc))
	return mux
}

// decodeJSON reads a RateLimitRequest in protojson (field names in
// lowerCamelCase or as in the proto; unknown fields are an error).
func decodeJSON(b []byte) (*pb.RateLimitRequest, error) {
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal(b, &req); err != nil {
		return nil, err
	}
	return &req, rls.Validate(&req)
}

// jsonHandler is POST /json: envoyproxy/ratelimit's debug endpoint, a
// RateLimitRequest in, the RateLimitResponse out, both in protojson's
// defaults. Like that endpoint it answers 429 for OVER_LIMIT, 200 for OK,
// and 400 for a body it cannot read.
func jsonHandler(s *rls.Service) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxBody))
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				http.Error(rw, "body over 1 MiB", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		req, err := decodeJSON(b)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.Check(r.Context(), req)
		if err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, rls.ErrBadRequest) {
				code = http.StatusBadRequest
			}
			http.Error(rw, err.Error(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			rw.WriteHeader(http.StatusTooManyRequests)
		}
		rw.Write(out)
	})
}
