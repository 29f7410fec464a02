// Operator policies: the policies page over /api/operator-policies.
import "./policies.js";
