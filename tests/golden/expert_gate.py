class ExpertGate(nn.Module):
    """Expert Gate

    The gate box computes the gates of one token over the routed experts. The router scores
    every expert. The scores are divided by a temperature before the score function. A
    temperature of one leaves the scores unchanged. The released configuration sets none, so
    the released value is one. A correction bias of one learned number per expert is added
    to one copy of the scores. The six experts are chosen from that copy. The released model
    holds a second bias for a token inside an image span. A model that reads text alone
    never reaches that bias. A chosen slot carries one where the biased score of its expert
    is above zero and zero elsewhere. The score without the bias is multiplied by that
    number. The score function returns a value above zero. The number is therefore one
    unless the bias of a chosen expert is at or below minus its score. The released code
    reads the score without the bias at every chosen expert whatever the sign of the biased
    score. The expression and the released code therefore differ in that one case, where the
    expression gives the expert a gate of zero. The six gates are divided by their sum plus
    a small epsilon and scaled by the route scale. The epsilon keeps the division defined
    when all six scores have underflowed to zero.

    Inputs: m: Q(BF16)[m].
    Returns: Q(FP32)[k/e].

    Arrays that can hold dead positions (FORMAT.md \xa72.4) travel with a bool mask `<name>_live`;
    dead positions hold 0.
    """

    def __init__(self, *, e=8, k=2, m=64, tau=1, varepsilon_r=1e-20, quant='exact'):
        super().__init__()
        self.k = k
        self.tau = tau
        self.varepsilon_r = varepsilon_r
        self.emulate = quant == "emulate"
        self.w_r = nn.Parameter(torch.randn(m, e) * m ** -0.5)
        self.bias = nn.Parameter(torch.zeros(e))

    def forward(self, m):
        # Cast
        as_fp32 = round_fp32(m) if self.emulate else m  # held in Q(FP32)
        w_r_out = as_fp32 @ self.w_r  # [e]
        if self.emulate:
            w_r_out = round_fp32(w_r_out)  # held in Q(FP32)
        # x / \tau
        x_tau = w_r_out / self.tau  # [e]
        if self.emulate:
            x_tau = round_fp32(x_tau)  # held in Q(FP32)
        # \sqrt{s^{+}}
        sqrt_s = torch.sqrt(torch.log(torch.exp(x_tau) + 1))  # [e]
        if self.emulate:
            sqrt_s = round_fp32(sqrt_s)  # held in Q(FP32)
        as_fp32_2 = round_fp32(self.bias) if self.emulate else self.bias  # held in Q(FP32)
        total = sqrt_s + as_fp32_2  # [e]
        if self.emulate:
            total = round_fp32(total)  # held in Q(FP32)
        # TopK
        # positions of the k largest
        kept = torch.topk(total, min(self.k, total.shape[-1]), dim=-1).indices
        top_k_live = torch.zeros_like(total, dtype=torch.bool).scatter(-1, kept, True)  # [k/e]
        top_k = torch.where(top_k_live, total, 0)  # [k/e]
        if self.emulate:
            top_k = round_fp32(top_k)  # held in Q(FP32)
        value_1_x_0 = (top_k > 0).to(top_k.dtype)  # [k/e]
        if self.emulate:
            value_1_x_0 = round_fp32(value_1_x_0)  # held in Q(FP32)
        # Select
        selected = value_1_x_0 * sqrt_s  # [k/e]
        selected_live = top_k_live
        selected_2 = torch.where(selected_live, selected, 0)  # [k/e]
        if self.emulate:
            selected_2 = round_fp32(selected_2)  # held in Q(FP32)
        l1_normed = selected_2 / (selected_2.sum(dim=-1, keepdim=True) + self.varepsilon_r)  # [k/e]
        l1_normed_2 = torch.where(selected_live, l1_normed, 0)  # [k/e]
        if self.emulate:
            l1_normed_2 = round_fp32(l1_normed_2)  # held in Q(FP32)
        # \tfrac{3}{2}x
        value_3_2_x = l1_normed_2 * 3 / 2  # [k/e]
        if self.emulate:
            value_3_2_x = round_fp32(value_3_2_x)  # held in Q(FP32)
        return value_3_2_x, selected_live


PARAM_KEYS = {
    'w_r': 'Expert Gate/W^{R}.weight',
    'bias': 'Expert Gate/bias.weight',
}
"""state_dict key -> parameter key of the reference interpreter."""
