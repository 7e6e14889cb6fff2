package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"text/template"
)

// probeFuncs stand in for the template functions whose output is not only random but costly:
// key generation (RSA-2048 for genCA, genSelfSignedCert and genSignedCert, RSA-4096 for
// genPrivateKey; 40-100 ms each on a small core) and bcrypt. A "probe" render runs the chart with
// them instead of Masterminds sprig's, and stacksync compares it with a real render of the same
// inputs: every field that differs is generated at render time. That tells the generated fields
// for the price of one real render and one without key generation, where two real renders
// cost twice the keys.
//
// Each stand-in takes the same arguments as sprig's function (so a call helm would refuse for its
// arguments is refused the same way) and returns a value of the same shape whose text is fresh
// random bytes (so it differs from the real render's). The certificate a stand-in takes to sign
// with is not looked at: a probe's certificates are never used. The functions that are cheap
// (random strings and numbers, UUIDs, the time, AES) stay sprig's.
func probeFuncs() template.FuncMap {
	return template.FuncMap{
		"genCA": func(cn string, daysValid int) (probeCertificate, error) {
			return newProbeCertificate(), nil
		},
		"genCAWithKey": func(cn string, daysValid int, privPEM string) (probeCertificate, error) {
			return newProbeCertificate(), nil
		},
		"genSelfSignedCert": func(cn string, ips []any, alternateDNS []any, daysValid int) (probeCertificate, error) {
			return newProbeCertificate(), nil
		},
		"genSelfSignedCertWithKey": func(cn string, ips []any, alternateDNS []any, daysValid int, privPEM string) (probeCertificate, error) {
			return newProbeCertificate(), nil
		},
		"genSignedCert": func(cn string, ips []any, alternateDNS []any, daysValid int, ca any) (probeCertificate, error) {
			return newProbeCertificate(), nil
		},
		"genSignedCertWithKey": func(cn string, ips []any, alternateDNS []any, daysValid int, ca any, privPEM string) (probeCertificate, error) {
			return newProbeCertificate(), nil
		},
		"genPrivateKey": func(typ string) string {
			return probePEM("PRIVATE KEY")
		},
		"bcrypt": func(input string) string {
			return "$2a$10$" + probeToken(22+31)
		},
		"htpasswd": func(username string, password string) string {
			return username + ":$2a$10$" + probeToken(22+31)
		},
	}
}

// probeCertificate has the fields of sprig's certificate, the ones templates read.
type probeCertificate struct {
	Cert string
	Key  string
}

func newProbeCertificate() probeCertificate {
	return probeCertificate{Cert: probePEM("CERTIFICATE"), Key: probePEM("RSA PRIVATE KEY")}
}

// probePEM is a PEM block of the given type around random bytes (not a key or certificate).
func probePEM(kind string) string {
	var b [48]byte
	_, _ = rand.Read(b[:])
	return "-----BEGIN " + kind + "-----\n" + base64.StdEncoding.EncodeToString(b[:]) + "\n-----END " + kind + "-----\n"
}

// probeToken is n random characters.
func probeToken(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
