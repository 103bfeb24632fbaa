package kubernetes

// The API objects this tier makes and reads, in the API's own field names
// (only those cordon sets or reads).

type meta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	OwnerReferences   []ownerRef        `json:"ownerReferences,omitempty"`
	DeletionTimestamp *string           `json:"deletionTimestamp,omitempty"`
}

type ownerRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

type pod struct {
	APIVersion string    `json:"apiVersion,omitempty"`
	Kind       string    `json:"kind,omitempty"`
	Metadata   meta      `json:"metadata"`
	Spec       podSpec   `json:"spec"`
	Status     podStatus `json:"status,omitzero"`
}

type podSpec struct {
	RestartPolicy                 string       `json:"restartPolicy"`
	AutomountServiceAccountToken  *bool        `json:"automountServiceAccountToken"`
	EnableServiceLinks            *bool        `json:"enableServiceLinks"`
	Hostname                      string       `json:"hostname,omitempty"`
	DNSPolicy                     string       `json:"dnsPolicy,omitempty"`
	DNSConfig                     *dnsConfig   `json:"dnsConfig,omitempty"`
	HostNetwork                   bool         `json:"hostNetwork"`
	HostPID                       bool         `json:"hostPID"`
	HostIPC                       bool         `json:"hostIPC"`
	ShareProcessNamespace         *bool        `json:"shareProcessNamespace"`
	RuntimeClassName              string       `json:"runtimeClassName,omitempty"`
	TerminationGracePeriodSeconds *int64       `json:"terminationGracePeriodSeconds,omitempty"`
	SecurityContext               *podSecurity `json:"securityContext,omitempty"`
	InitContainers                []container  `json:"initContainers,omitempty"`
	Containers                    []container  `json:"containers"`
	Volumes                       []volume     `json:"volumes,omitempty"`
}

type dnsConfig struct {
	Nameservers []string    `json:"nameservers"`
	Options     []dnsOption `json:"options,omitempty"`
}

type dnsOption struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type podSecurity struct {
	SeccompProfile *seccompProfile `json:"seccompProfile,omitempty"`
	Sysctls        []sysctl        `json:"sysctls,omitempty"`
}

type sysctl struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type seccompProfile struct {
	Type string `json:"type"`
}

type container struct {
	Name            string          `json:"name"`
	Image           string          `json:"image"`
	ImagePullPolicy string          `json:"imagePullPolicy,omitempty"`
	Command         []string        `json:"command,omitempty"`
	Args            []string        `json:"args,omitempty"`
	WorkingDir      string          `json:"workingDir,omitempty"`
	Env             []envVar        `json:"env,omitempty"`
	Ports           []containerPort `json:"ports,omitempty"`
	Resources       resources       `json:"resources,omitzero"`
	VolumeMounts    []volumeMount   `json:"volumeMounts,omitempty"`
	SecurityContext *security       `json:"securityContext,omitempty"`
	Stdin           bool            `json:"stdin"`
	TTY             bool            `json:"tty"`
}

type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type containerPort struct {
	Name          string `json:"name,omitempty"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
}

type resources struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	SubPath   string `json:"subPath,omitempty"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

type security struct {
	RunAsUser                *int64          `json:"runAsUser,omitempty"`
	RunAsGroup               *int64          `json:"runAsGroup,omitempty"`
	RunAsNonRoot             *bool           `json:"runAsNonRoot,omitempty"`
	Privileged               *bool           `json:"privileged"`
	AllowPrivilegeEscalation *bool           `json:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool           `json:"readOnlyRootFilesystem"`
	Capabilities             *capabilities   `json:"capabilities,omitempty"`
	SeccompProfile           *seccompProfile `json:"seccompProfile,omitempty"`
	ProcMount                string          `json:"procMount,omitempty"`
}

type capabilities struct {
	Drop []string `json:"drop,omitempty"`
	Add  []string `json:"add,omitempty"`
}

type volume struct {
	Name                  string        `json:"name"`
	EmptyDir              *emptyDir     `json:"emptyDir,omitempty"`
	Secret                *secretVolume `json:"secret,omitempty"`
	PersistentVolumeClaim *claimVolume  `json:"persistentVolumeClaim,omitempty"`
}

type emptyDir struct {
	Medium    string `json:"medium,omitempty"`
	SizeLimit string `json:"sizeLimit,omitempty"`
}

type secretVolume struct {
	SecretName  string `json:"secretName"`
	DefaultMode *int   `json:"defaultMode,omitempty"`
}

type claimVolume struct {
	ClaimName string `json:"claimName"`
}

type podStatus struct {
	Phase                 string            `json:"phase,omitempty"`
	Reason                string            `json:"reason,omitempty"`
	Message               string            `json:"message,omitempty"`
	PodIP                 string            `json:"podIP,omitempty"`
	ContainerStatuses     []containerStatus `json:"containerStatuses,omitempty"`
	InitContainerStatuses []containerStatus `json:"initContainerStatuses,omitempty"`
	Conditions            []struct {
		Type    string `json:"type"`
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"conditions,omitempty"`
}

type containerStatus struct {
	Name  string `json:"name"`
	State struct {
		Waiting *struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"waiting,omitempty"`
		Running *struct {
			StartedAt string `json:"startedAt"`
		} `json:"running,omitempty"`
		Terminated *struct {
			ExitCode int    `json:"exitCode"`
			Reason   string `json:"reason"`
			Message  string `json:"message"`
		} `json:"terminated,omitempty"`
	} `json:"state"`
	ContainerID string `json:"containerID,omitempty"`
}

type secret struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   meta              `json:"metadata"`
	Type       string            `json:"type"`
	Immutable  bool              `json:"immutable"`
	Data       map[string][]byte `json:"data"`
}

type networkPolicy struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   meta              `json:"metadata"`
	Spec       networkPolicySpec `json:"spec"`
}

type networkPolicySpec struct {
	PodSelector labelSelector `json:"podSelector"`
	PolicyTypes []string      `json:"policyTypes"`
	Ingress     []policyRule  `json:"ingress"`
	Egress      []policyRule  `json:"egress"`
}

type labelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// policyRule is an ingress or an egress rule: peers (from or to) and
// ports.
type policyRule struct {
	From  []policyPeer `json:"from,omitempty"`
	To    []policyPeer `json:"to,omitempty"`
	Ports []policyPort `json:"ports,omitempty"`
}

type policyPeer struct {
	IPBlock           *ipBlock       `json:"ipBlock,omitempty"`
	NamespaceSelector *labelSelector `json:"namespaceSelector,omitempty"`
	PodSelector       *labelSelector `json:"podSelector,omitempty"`
}

type ipBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

type policyPort struct {
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
}

type list[T any] struct {
	Items []T `json:"items"`
}

type claim struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Metadata   meta      `json:"metadata"`
	Spec       claimSpec `json:"spec"`
}

type claimSpec struct {
	AccessModes      []string  `json:"accessModes"`
	StorageClassName string    `json:"storageClassName,omitempty"`
	Resources        resources `json:"resources"`
}
