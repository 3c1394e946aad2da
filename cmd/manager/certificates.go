package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
)

// certificateExpiry reports, at scrape time, when the certificates the
// manager serves with expire. It reads the files cert-manager writes (the
// ones certwatcher reloads), so a rotation shows at the next scrape and a
// stuck renewal shows as a deadline that comes closer. controller-runtime's
// certwatcher counts reads and read errors but exports no expiry.
type certificateExpiry struct {
	files map[string]string // server ("webhook", "metrics") -> certificate file
}

var (
	descCertificateExpiry = prometheus.NewDesc("subnet_operator_certificate_expiry_timestamp_seconds",
		"When the leaf certificate a server of the manager presents expires, in Unix seconds; absent while the file cannot be read.",
		[]string{"server"}, nil)
	descCertificateReadable = prometheus.NewDesc("subnet_operator_certificate_readable",
		"1 when the certificate file of a server parses, 0 when it does not (missing, empty or not PEM).",
		[]string{"server"}, nil)
)

func (c *certificateExpiry) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCertificateExpiry
	ch <- descCertificateReadable
}

func (c *certificateExpiry) Collect(ch chan<- prometheus.Metric) {
	for server, file := range c.files {
		cert, err := readLeafCertificate(file)
		readable := 1.0
		if err != nil {
			readable = 0
		}
		ch <- prometheus.MustNewConstMetric(descCertificateReadable, prometheus.GaugeValue, readable, server)
		if err == nil {
			ch <- prometheus.MustNewConstMetric(descCertificateExpiry, prometheus.GaugeValue, float64(cert.NotAfter.Unix()), server)
		}
	}
}

// readLeafCertificate parses the first certificate of a PEM file: the leaf,
// as tls.LoadX509KeyPair orders a chain.
func readLeafCertificate(file string) (*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no CERTIFICATE block")
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parsing %s: %w", file, err)
			}
			return cert, nil
		}
	}
}
