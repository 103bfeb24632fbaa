package kubernetes

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// cluster is how to reach an API server: its address, the TLS
// configuration that trusts it and presents the client's certificate, and
// a bearer token (read from tokenFile on every request where that is set,
// as a projected service-account token rotates).
type cluster struct {
	server    string
	tls       *tls.Config
	token     string
	tokenFile string
	namespace string // the context's, or the service account's
}

// kubeconfig is the part of a kubeconfig file cordon reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			TLSServerName            string `json:"tls-server-name"`
			ProxyURL                 string `json:"proxy-url"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			ClientCertificate     string    `json:"client-certificate"`
			ClientCertificateData string    `json:"client-certificate-data"`
			ClientKey             string    `json:"client-key"`
			ClientKeyData         string    `json:"client-key-data"`
			Token                 string    `json:"token"`
			TokenFile             string    `json:"tokenFile"`
			Exec                  *struct{} `json:"exec"`
			AuthProvider          *struct{} `json:"auth-provider"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster   string `json:"cluster"`
			User      string `json:"user"`
			Namespace string `json:"namespace"`
		} `json:"context"`
	} `json:"contexts"`
}

// loadKubeconfig reads path (the first of a KUBECONFIG list that exists)
// and resolves its current context, or context when given.
func loadKubeconfig(path, context string) (*cluster, error) {
	var raw []byte
	var err error
	for _, p := range filepath.SplitList(path) {
		if raw, err = os.ReadFile(p); err == nil {
			path = p
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if context == "" {
		context = kc.CurrentContext
	}
	if context == "" {
		return nil, fmt.Errorf("kubeconfig %s names no current context", path)
	}
	base := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(base, p)
	}
	var c cluster
	for _, x := range kc.Contexts {
		if x.Name != context {
			continue
		}
		c.namespace = x.Context.Namespace
		var tc tls.Config
		found := 0
		for _, cl := range kc.Clusters {
			if cl.Name != x.Context.Cluster {
				continue
			}
			found++
			k := cl.Cluster
			if k.ProxyURL != "" {
				return nil, fmt.Errorf("kubeconfig %s: cluster %s goes through a proxy (proxy-url), which cordon does not follow", path, cl.Name)
			}
			c.server = strings.TrimSuffix(k.Server, "/")
			tc.ServerName = k.TLSServerName
			tc.InsecureSkipVerify = k.InsecureSkipTLSVerify
			pem, err := fileOrData(rel(k.CertificateAuthority), k.CertificateAuthorityData)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: cluster %s: certificate authority: %w", path, cl.Name, err)
			}
			if pem != nil {
				tc.RootCAs = x509.NewCertPool()
				if !tc.RootCAs.AppendCertsFromPEM(pem) {
					return nil, fmt.Errorf("kubeconfig %s: cluster %s: no certificate in its certificate authority", path, cl.Name)
				}
			}
		}
		for _, u := range kc.Users {
			if u.Name != x.Context.User {
				continue
			}
			found++
			k := u.User
			if k.Exec != nil || k.AuthProvider != nil {
				return nil, fmt.Errorf("kubeconfig %s: user %s authenticates through a plugin (exec or auth-provider), which cordon does not run; give it a token, a token file or a client certificate", path, u.Name)
			}
			c.token, c.tokenFile = k.Token, rel(k.TokenFile)
			cert, err := fileOrData(rel(k.ClientCertificate), k.ClientCertificateData)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: user %s: client certificate: %w", path, u.Name, err)
			}
			key, err := fileOrData(rel(k.ClientKey), k.ClientKeyData)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: user %s: client key: %w", path, u.Name, err)
			}
			if cert != nil || key != nil {
				pair, err := tls.X509KeyPair(cert, key)
				if err != nil {
					return nil, fmt.Errorf("kubeconfig %s: user %s: %w", path, u.Name, err)
				}
				tc.Certificates = []tls.Certificate{pair}
			}
		}
		if found != 2 || c.server == "" {
			return nil, fmt.Errorf("kubeconfig %s: context %s does not name a cluster with a server and a user", path, context)
		}
		c.tls = &tc
		return &c, nil
	}
	return nil, fmt.Errorf("kubeconfig %s has no context %s", path, context)
}

// fileOrData is the file's content, else the base64 data's, else nil.
func fileOrData(file, data string) ([]byte, error) {
	if data != "" {
		return base64.StdEncoding.DecodeString(data)
	}
	if file == "" {
		return nil, nil
	}
	return os.ReadFile(file)
}

// The service account's files in a pod (the daemon run in the cluster).
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// inCluster is the API server as a pod reaches it, with the pod's service
// account.
func inCluster() (*cluster, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a cluster (KUBERNETES_SERVICE_HOST is not set) and no kubeconfig is given")
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccountDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("in-cluster configuration: no certificate in the service account's ca.crt")
	}
	ns, _ := os.ReadFile(filepath.Join(serviceAccountDir, "namespace"))
	return &cluster{
		server:    "https://" + net.JoinHostPort(host, port),
		tls:       &tls.Config{RootCAs: pool},
		tokenFile: filepath.Join(serviceAccountDir, "token"),
		namespace: strings.TrimSpace(string(ns)),
	}, nil
}
