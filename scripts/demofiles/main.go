// Command demofiles is `make run`'s stand-in for a shop's object store: it
// serves the files of -dir over HTTPS on -addr (127.0.0.1 only) with a
// certificate it makes at start, whose PEM it writes to -ca for mailsvc's
// attachments.tls_ca_file. It runs until killed. Not for production.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	dir := flag.String("dir", ".run/demo-files/files", "directory to serve")
	addr := flag.String("addr", "127.0.0.1:8443", "address to listen on")
	caFile := flag.String("ca", ".run/demo-files/ca.pem", "where to write the certificate (PEM)")
	flag.Parse()
	cert, err := selfSigned(*caFile)
	if err != nil {
		log.Fatalf("demofiles: %v", err)
	}
	srv := &http.Server{
		Addr: *addr, Handler: http.FileServer(http.Dir(*dir)), ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	fmt.Printf("demofiles: serving %s on https://%s/\n", *dir, *addr)
	log.Fatal(srv.ListenAndServeTLS("", ""))
}

// selfSigned makes a certificate for 127.0.0.1, valid for a day, and
// writes it to caFile.
func selfSigned(caFile string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "mailsvc demo files"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
