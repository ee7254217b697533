class FirstSinkhornRound(nn.Module):
    """First Sinkhorn Round

    The first round of Sinkhorn normalisation differs from the nineteen after it. Every
    entry of the combine matrix is replaced by its exponential. Each row is divided by its
    sum. The exponential and the division together are a softmax along the row. The released
    kernel then adds a small epsilon to every entry. The exponential of a large negative
    number underflows to zero. With the epsilon such an entry is still above zero. Each
    column is then divided by its sum plus the same epsilon.

    Inputs: n_n: Q(FP32)[n, n].
    Returns: Q(FP32)[n, n].
    """

    def __init__(self, *, varepsilon_hc=1e-06, quant='exact'):
        super().__init__()
        self.varepsilon_hc = varepsilon_hc
        self.emulate = quant == "emulate"

    def forward(self, n_n):
        e_x = torch.exp(n_n)  # [n, n]
        if self.emulate:
            e_x = round_fp32(e_x)  # held in Q(FP32)
        l1_normed = e_x / e_x.sum(dim=-1, keepdim=True)  # [n, n]
        if self.emulate:
            l1_normed = round_fp32(l1_normed)  # held in Q(FP32)
        # x + \varepsilon_{hc}
        x_varepsilon_hc = l1_normed + self.varepsilon_hc  # [n, n]
        if self.emulate:
            x_varepsilon_hc = round_fp32(x_varepsilon_hc)  # held in Q(FP32)
        # [n, n]
        l1_normed_2 = (x_varepsilon_hc
                       / (x_varepsilon_hc.sum(dim=-2, keepdim=True) + self.varepsilon_hc))
        if self.emulate:
            l1_normed_2 = round_fp32(l1_normed_2)  # held in Q(FP32)
        return l1_normed_2


class SinkhornRound(nn.Module):
    """Sinkhorn Round

    Each of the nineteen later rounds of Sinkhorn normalisation divides every row of the
    combine matrix by its sum plus a small epsilon. Each round then divides every column by
    its sum plus the same epsilon. A row or a column that sums to zero would otherwise be
    divided by zero. The epsilon keeps the division defined. After the rounds every row and
    every column sums to about one. A matrix with those sums is doubly stochastic. Each new
    stream is therefore a weighted average of the four old streams. The sum of the streams
    is kept.

    Inputs: n_n: Q(FP32)[n, n].
    Returns: Q(FP32)[n, n].
    """

    def __init__(self, *, varepsilon_hc=1e-06, quant='exact'):
        super().__init__()
        self.varepsilon_hc = varepsilon_hc
        self.emulate = quant == "emulate"

    def forward(self, n_n):
        l1_normed = n_n / (n_n.sum(dim=-1, keepdim=True) + self.varepsilon_hc)  # [n, n]
        if self.emulate:
            l1_normed = round_fp32(l1_normed)  # held in Q(FP32)
        # [n, n]
        l1_normed_2 = l1_normed / (l1_normed.sum(dim=-2, keepdim=True) + self.varepsilon_hc)
        if self.emulate:
            l1_normed_2 = round_fp32(l1_normed_2)  # held in Q(FP32)
        return l1_normed_2


class MixingCoefficients(nn.Module):
    """Mixing Coefficients

    This block predicts the mixing coefficients of one token. The four streams are
    normalised together. Three linear maps read the normalised streams. The first gives the
    collapse vector through a sigmoid plus a small epsilon, so the weight of a stream is
    above zero. The second gives the output vector through a doubled sigmoid. The third
    gives the four-by-four combine matrix. Twenty rounds of Sinkhorn normalisation make that
    matrix nearly doubly stochastic. Every row and every column of that matrix sums to about
    one.

    Inputs: n_m: Q(BF16)[n, m].
    Returns: Q(FP32)[n], Q(FP32)[n], Q(FP32)[n, n].
    """

    def __init__(self, *, m=64, n=4, varepsilon=1e-20, varepsilon_hc=1e-06, quant='exact'):
        super().__init__()
        self.varepsilon = varepsilon
        self.varepsilon_hc = varepsilon_hc
        self.emulate = quant == "emulate"
        self.h_0 = nn.Parameter(torch.randn(n, m, n) * (n * m) ** -0.5)
        self.h_0_bias = nn.Parameter(torch.zeros(n))
        self.h_1 = nn.Parameter(torch.randn(n, m, n) * (n * m) ** -0.5)
        self.h_1_bias = nn.Parameter(torch.zeros(n))
        self.h_2 = nn.Parameter(torch.randn(n, m, n, n) * (n * m) ** -0.5)
        self.h_2_bias = nn.Parameter(torch.zeros(n, n))
        self.first_sinkhorn_round = FirstSinkhornRound(varepsilon_hc=varepsilon_hc, quant=quant)
        self.sinkhorn_rounds = nn.ModuleList(
            [SinkhornRound(varepsilon_hc=varepsilon_hc, quant=quant) for _ in range(19)])

    def forward(self, n_m):
        # Cast
        as_fp32 = round_fp32(n_m) if self.emulate else n_m  # held in Q(FP32)
        # [n, m]
        normed = (as_fp32
                  / torch.sqrt(as_fp32.pow(2).mean(dim=(-2, -1), keepdim=True) + self.varepsilon))
        if self.emulate:
            normed = round_fp32(normed)  # held in Q(FP32)
        h_0_out = torch.tensordot(normed, self.h_0, dims=2) + self.h_0_bias  # [n]
        if self.emulate:
            h_0_out = round_fp32(h_0_out)  # held in Q(FP32)
        # \sigma
        sigma = torch.sigmoid(h_0_out)  # [n]
        if self.emulate:
            sigma = round_fp32(sigma)  # held in Q(FP32)
        # x + \varepsilon_{hc}
        x_varepsilon_hc = sigma + self.varepsilon_hc  # [n]
        if self.emulate:
            x_varepsilon_hc = round_fp32(x_varepsilon_hc)  # held in Q(FP32)
        h_1_out = torch.tensordot(normed, self.h_1, dims=2) + self.h_1_bias  # [n]
        if self.emulate:
            h_1_out = round_fp32(h_1_out)  # held in Q(FP32)
        # 2\sigma
        value_2_sigma = torch.sigmoid(h_1_out) * 2  # [n]
        if self.emulate:
            value_2_sigma = round_fp32(value_2_sigma)  # held in Q(FP32)
        h_2_out = torch.tensordot(normed, self.h_2, dims=2) + self.h_2_bias  # [n, n]
        if self.emulate:
            h_2_out = round_fp32(h_2_out)  # held in Q(FP32)
        first_sinkhorn_round = self.first_sinkhorn_round(h_2_out)  # [n, n]
        # Sinkhorn Round, 19 times with parameters per iteration
        sinkhorn_round = first_sinkhorn_round
        for block in self.sinkhorn_rounds:
            sinkhorn_round = block(sinkhorn_round)  # [n, n]
        return x_varepsilon_hc, value_2_sigma, sinkhorn_round


PARAM_KEYS = {
    'h_0': 'Mixing Coefficients/H_{0}.weight',
    'h_0_bias': 'Mixing Coefficients/H_{0}.bias',
    'h_1': 'Mixing Coefficients/H_{1}.weight',
    'h_1_bias': 'Mixing Coefficients/H_{1}.bias',
    'h_2': 'Mixing Coefficients/H_{2}.weight',
    'h_2_bias': 'Mixing Coefficients/H_{2}.bias',
}
"""state_dict key -> parameter key of the reference interpreter."""
