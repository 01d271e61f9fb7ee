// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {TestBase, Vm} from "./Vm.sol";
import {KeeperToken} from "../src/KeeperToken.sol";
import {ExperienceRegistry, IVotesToken} from "../src/ExperienceRegistry.sol";

contract ExperienceRegistryTest is TestBase {
    KeeperToken internal token;
    ExperienceRegistry internal reg;

    address internal constant ALICE = address(0xA11CE); // 40 KEEPER
    address internal constant BOB = address(0xB0B); // 26 KEEPER
    address internal constant CAROL = address(0xCA201); // 34 KEEPER
    address internal constant DAVE = address(0xDA7E); // none
    address internal constant ERIN = address(0xE214); // none unless a test mints

    uint256 internal constant UNIT = 1e18;
    uint64 internal constant PERIOD = 1 days;
    uint16 internal constant QUORUM_BPS = 2000; // 20%

    bytes32 internal constant LIB = keccak256("arith-word-problems");
    bytes32 internal constant LIB2 = keccak256("other-library");
    bytes32 internal constant ROOT1 = keccak256("root-1");
    bytes32 internal constant ROOT2 = keccak256("root-2");
    bytes32 internal constant ROOT3 = keccak256("root-3");

    function setUp() public {
        vm.warp(1_700_000_000);
        token = new KeeperToken();
        reg = new ExperienceRegistry(IVotesToken(address(token)), QUORUM_BPS, PERIOD);
        token.mint(ALICE, 40 * UNIT);
        token.mint(BOB, 26 * UNIT);
        token.mint(CAROL, 34 * UNIT);
        // Balances are read at block.number - 1 of the proposing transaction.
        vm.roll(block.number + 1);
    }

    // ------------------------------------------------------------ helpers --

    function _propose(address who, bytes32 lib, bytes32 base, uint64 baseV, bytes32 root, uint64 v)
        internal
        returns (uint256)
    {
        vm.prank(who);
        return reg.propose(lib, base, baseV, root, v);
    }

    function _first() internal returns (uint256) {
        return _propose(ALICE, LIB, bytes32(0), 0, ROOT1, 1);
    }

    function _vote(address who, uint256 id, bool support) internal returns (uint256) {
        vm.prank(who);
        return reg.vote(id, support);
    }

    function _pastDeadline(uint256 id) internal {
        vm.warp(reg.getProposal(id).deadline);
    }

    function _state(uint256 id) internal view returns (uint256) {
        return uint256(reg.state(id));
    }

    // -------------------------------------------------------- happy path --

    function test_HappyPath_CreateVoteExecute() public {
        uint256 id = _first();
        vm.assertEq(id, 1, "first id");
        vm.assertEq(reg.proposalCount(), 1, "count");

        ExperienceRegistry.Proposal memory p = reg.getProposal(id);
        vm.assertEq(p.libraryId, LIB, "library");
        vm.assertEq(p.baseRoot, bytes32(0), "base root");
        vm.assertEq(p.newRoot, ROOT1, "new root");
        vm.assertEq(uint256(p.baseVersion), 0, "base version");
        vm.assertEq(uint256(p.newVersion), 1, "new version");
        vm.assertEq(p.author, ALICE, "author");
        vm.assertEq(uint256(p.deadline), block.timestamp + PERIOD, "deadline");
        vm.assertEq(p.snapshotBlock, block.number - 1, "snapshot");
        vm.assertEq(p.snapshotSupply, 100 * UNIT, "supply");
        vm.assertEq(p.quorumVotes, 20 * UNIT, "quorum votes");
        vm.assertFalse(p.executed, "not executed");

        vm.assertEq(_vote(ALICE, id, true), 40 * UNIT, "alice weight");
        vm.assertEq(_state(id), uint256(ExperienceRegistry.ProposalState.Active), "active");
        vm.assertEq(_vote(BOB, id, true), 26 * UNIT, "bob weight");
        vm.assertEq(_vote(CAROL, id, false), 34 * UNIT, "carol weight");
        vm.assertTrue(reg.hasVoted(id, ALICE), "alice voted");
        vm.assertFalse(reg.hasVoted(id, DAVE), "dave did not");
        vm.assertEq(reg.getProposal(id).yesWeight, 66 * UNIT, "yes weight");
        vm.assertEq(reg.getProposal(id).noWeight, 34 * UNIT, "no weight");

        _pastDeadline(id);
        vm.assertEq(_state(id), uint256(ExperienceRegistry.ProposalState.Succeeded), "succeeded");
        vm.prank(DAVE); // anyone may execute
        reg.execute(id);

        vm.assertEq(reg.acceptedRoot(LIB), ROOT1, "accepted root");
        vm.assertEq(uint256(reg.acceptedVersion(LIB)), 1, "accepted version");
        (bytes32 root, uint64 version, uint256 pid) = reg.accepted(LIB);
        vm.assertEq(root, ROOT1, "accepted().root");
        vm.assertEq(uint256(version), 1, "accepted().version");
        vm.assertEq(pid, id, "accepted().proposalId");
        vm.assertTrue(reg.getProposal(id).executed, "executed flag");
        vm.assertEq(_state(id), uint256(ExperienceRegistry.ProposalState.Executed), "executed state");

        // The next version builds on the accepted one.
        uint256 id2 = _propose(BOB, LIB, ROOT1, 1, ROOT2, 2);
        _vote(ALICE, id2, true);
        _vote(BOB, id2, true);
        _pastDeadline(id2);
        reg.execute(id2);
        vm.assertEq(reg.acceptedRoot(LIB), ROOT2, "second root");
        vm.assertEq(uint256(reg.acceptedVersion(LIB)), 2, "second version");
    }

    function test_LibrariesAreIndependent() public {
        uint256 id = _first();
        _vote(ALICE, id, true);
        _vote(BOB, id, true);
        _pastDeadline(id);
        reg.execute(id);
        vm.assertEq(reg.acceptedRoot(LIB2), bytes32(0), "other library untouched");
        vm.assertEq(uint256(reg.acceptedVersion(LIB2)), 0, "other version untouched");
        // LIB2 still starts from zero even though LIB moved on.
        uint256 id2 = _propose(CAROL, LIB2, bytes32(0), 0, ROOT1, 7);
        vm.assertEq(id2, 2, "ids are global");
    }

    // ------------------------------------------------------- supermajority --

    function test_ExactlyAt66PercentIsAccepted() public {
        uint256 id = _first();
        _vote(ALICE, id, true); // 40
        _vote(BOB, id, true); // 26 -> yes 66
        _vote(CAROL, id, false); // 34 -> 66 / 100 exactly
        _pastDeadline(id);
        reg.execute(id);
        vm.assertEq(reg.acceptedRoot(LIB), ROOT1, "66% exactly is enough");
    }

    function test_JustBelow66PercentIsRejected() public {
        token.mint(ERIN, 1); // one wei more on the no side tips it below 66%
        vm.roll(block.number + 1);
        uint256 id = _first();
        _vote(ALICE, id, true);
        _vote(BOB, id, true);
        _vote(CAROL, id, false);
        _vote(ERIN, id, false);
        _pastDeadline(id);
        vm.assertEq(_state(id), uint256(ExperienceRegistry.ProposalState.Defeated), "defeated");
        vm.expectRevert(
            abi.encodeWithSelector(ExperienceRegistry.NotAccepted.selector, id, 66 * UNIT, 34 * UNIT + 1, 20 * UNIT + 1)
        );
        reg.execute(id);
        vm.assertEq(reg.acceptedRoot(LIB), bytes32(0), "nothing accepted");
    }

    function test_SimpleMajorityIsRejected() public {
        uint256 id = _first();
        _vote(ALICE, id, true); // 40 yes
        _vote(BOB, id, false); // 26 no -> 60.6%
        _pastDeadline(id);
        vm.expectRevert(
            abi.encodeWithSelector(ExperienceRegistry.NotAccepted.selector, id, 40 * UNIT, 26 * UNIT, 20 * UNIT)
        );
        reg.execute(id);
    }

    function test_NoVotesIsNotAcceptedEvenWithZeroQuorum() public {
        reg.setQuorumBps(0);
        uint256 id = _first();
        _pastDeadline(id);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotAccepted.selector, id, 0, 0, 0));
        reg.execute(id);
    }

    // -------------------------------------------------------------- quorum --

    function test_QuorumNotMet() public {
        reg.setQuorumBps(5000); // 50 KEEPER of 100
        uint256 id = _first();
        _vote(ALICE, id, true); // 40, unanimous but below quorum
        _pastDeadline(id);
        vm.assertEq(_state(id), uint256(ExperienceRegistry.ProposalState.Defeated), "defeated");
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotAccepted.selector, id, 40 * UNIT, 0, 50 * UNIT));
        reg.execute(id);
    }

    function test_QuorumCountsNoVotesAndIsMetExactly() public {
        reg.setQuorumBps(10000); // everyone must vote
        uint256 id = _first();
        _vote(ALICE, id, true);
        _vote(BOB, id, true);
        _vote(CAROL, id, false);
        _pastDeadline(id);
        reg.execute(id); // 100 cast >= 100 quorum, 66% yes
        vm.assertEq(reg.acceptedRoot(LIB), ROOT1, "accepted at full quorum");
    }

    function test_QuorumIsFixedAtCreation() public {
        uint256 id = _first(); // quorum 20 KEEPER
        reg.setQuorumBps(9000); // later proposals need 90
        vm.assertEq(reg.getProposal(id).quorumVotes, 20 * UNIT, "unchanged");
        _vote(ALICE, id, true);
        _pastDeadline(id);
        reg.execute(id);
        vm.assertEq(reg.acceptedRoot(LIB), ROOT1, "old quorum applied");
        uint256 id2 = _propose(ALICE, LIB, ROOT1, 1, ROOT2, 2);
        vm.assertEq(reg.getProposal(id2).quorumVotes, 90 * UNIT, "new quorum");
    }

    function test_QuorumRoundsUp() public {
        token.mint(ERIN, 1); // supply 100e18 + 1
        vm.roll(block.number + 1);
        uint256 id = _first();
        vm.assertEq(reg.getProposal(id).quorumVotes, 20 * UNIT + 1, "ceil(supply * 20%)");
    }

    function test_OnlyOwnerSetsQuorumAndPeriod() public {
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotOwner.selector, ALICE));
        vm.prank(ALICE);
        reg.setQuorumBps(1);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotOwner.selector, ALICE));
        vm.prank(ALICE);
        reg.setVotingPeriod(1);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.InvalidQuorum.selector, uint16(10001)));
        reg.setQuorumBps(10001);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.InvalidVotingPeriod.selector, uint64(0)));
        reg.setVotingPeriod(0);
        reg.setQuorumBps(10000);
        vm.assertEq(uint256(reg.quorumBps()), 10000, "owner set quorum");
        reg.setVotingPeriod(2 days);
        vm.assertEq(uint256(reg.votingPeriod()), 2 days, "owner set period");
        reg.transferOwnership(ALICE);
        vm.assertEq(reg.owner(), ALICE, "new owner");
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotOwner.selector, address(this)));
        reg.setQuorumBps(1);
    }

    // -------------------------------------------------------------- voting --

    function test_DoubleVoteRejected() public {
        uint256 id = _first();
        _vote(ALICE, id, true);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.AlreadyVoted.selector, id, ALICE));
        vm.prank(ALICE);
        reg.vote(id, false); // switching sides is a second vote too
        vm.assertEq(reg.getProposal(id).yesWeight, 40 * UNIT, "yes counted once");
        vm.assertEq(reg.getProposal(id).noWeight, 0, "no untouched");
    }

    function test_VoteAfterDeadlineRejected() public {
        uint256 id = _first();
        uint64 deadline = reg.getProposal(id).deadline;
        vm.warp(deadline - 1);
        _vote(ALICE, id, true); // last second is still open
        vm.warp(deadline);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.VotingClosed.selector, id, deadline));
        vm.prank(BOB);
        reg.vote(id, true);
    }

    function test_NonHolderCannotVoteOrPropose() public {
        uint256 id = _first();
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotAVoter.selector, DAVE));
        vm.prank(DAVE);
        reg.vote(id, true);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotAVoter.selector, DAVE));
        vm.prank(DAVE);
        reg.propose(LIB, bytes32(0), 0, ROOT2, 1);
        vm.assertFalse(reg.hasVoted(id, DAVE), "no vote recorded");
    }

    function test_UnknownProposal() public {
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.UnknownProposal.selector, uint256(1)));
        vm.prank(ALICE);
        reg.vote(1, true);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.UnknownProposal.selector, uint256(0)));
        reg.execute(0);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.UnknownProposal.selector, uint256(5)));
        reg.state(5);
    }

    // ----------------------------------------------------------- snapshot --

    function test_TransferAfterProposalAddsNoWeight() public {
        uint256 id = _first();
        // Alice votes, then hands her tokens to Bob, who votes again with them.
        _vote(ALICE, id, true);
        vm.roll(block.number + 1);
        vm.prank(ALICE);
        token.transfer(BOB, 40 * UNIT);
        vm.roll(block.number + 1); // the transfer is now history for getPastVotes
        vm.assertEq(_vote(BOB, id, true), 26 * UNIT, "bob votes with his snapshot balance only");
        // Carol sends everything to Dave (a non-holder at the snapshot) before voting.
        vm.prank(CAROL);
        token.transfer(DAVE, 34 * UNIT);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotAVoter.selector, DAVE));
        vm.prank(DAVE);
        reg.vote(id, false);
        // Carol keeps her snapshot weight even with a zero balance now.
        vm.assertEq(_vote(CAROL, id, false), 34 * UNIT, "carol snapshot weight");
        vm.roll(block.number + 5);
        vm.assertEq(reg.getProposal(id).yesWeight, 66 * UNIT, "yes is 66, not 106");
        vm.assertEq(reg.getProposal(id).noWeight, 34 * UNIT, "no");
    }

    function test_TransferInCreationBlockAddsNoWeight() public {
        // Same block as the proposal, before it: still after the snapshot.
        vm.prank(CAROL);
        token.transfer(DAVE, 34 * UNIT);
        uint256 id = _first();
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotAVoter.selector, DAVE));
        vm.prank(DAVE);
        reg.vote(id, true);
        vm.assertEq(_vote(CAROL, id, true), 34 * UNIT, "carol counted at the snapshot");
    }

    function test_MintAfterProposalAddsNoWeightOrSupply() public {
        uint256 id = _first();
        token.mint(ERIN, 1000 * UNIT);
        vm.roll(block.number + 1);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.NotAVoter.selector, ERIN));
        vm.prank(ERIN);
        reg.vote(id, false);
        vm.assertEq(reg.getProposal(id).snapshotSupply, 100 * UNIT, "supply at snapshot");
    }

    // ------------------------------------------------------------- execute --

    function test_ExecuteBeforeDeadlineRejected() public {
        uint256 id = _first();
        _vote(ALICE, id, true); // 40 of a 100 supply: the other 60 could still vote no
        uint64 deadline = reg.getProposal(id).deadline;
        vm.assertEq(_state(id), uint256(ExperienceRegistry.ProposalState.Active), "active");
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.VotingOpen.selector, id, deadline));
        reg.execute(id);
        vm.warp(deadline - 1);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.VotingOpen.selector, id, deadline));
        reg.execute(id);
        vm.assertEq(reg.acceptedRoot(LIB), bytes32(0), "nothing accepted");
        // At the deadline the final tally decides (100% of 40 cast, quorum 20).
        vm.warp(deadline);
        reg.execute(id);
        vm.assertEq(reg.acceptedRoot(LIB), ROOT1, "accepted at the deadline");
    }

    function test_EarlyExecutionWhenDecidedClosesVoting() public {
        uint256 id = _first();
        _vote(ALICE, id, true);
        _vote(BOB, id, true); // 66% of the whole supply: no remaining vote can change it
        vm.assertEq(_state(id), uint256(ExperienceRegistry.ProposalState.Succeeded), "decided");
        vm.assertTrue(block.timestamp < reg.getProposal(id).deadline, "before the deadline");
        reg.execute(id);
        uint64 deadline = reg.getProposal(id).deadline;
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.VotingClosed.selector, id, deadline));
        vm.prank(CAROL);
        reg.vote(id, false);
    }

    function test_ExecuteTwiceRejected() public {
        uint256 id = _first();
        _vote(ALICE, id, true);
        _pastDeadline(id);
        reg.execute(id);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.AlreadyExecuted.selector, id));
        reg.execute(id);
    }

    function test_StaleBaseCannotBeExecuted() public {
        uint256 a = _first(); // 0 -> ROOT1 v1
        uint256 b = _propose(BOB, LIB, bytes32(0), 0, ROOT2, 1); // competing 0 -> ROOT2 v1
        _vote(ALICE, a, true);
        _vote(ALICE, b, true);
        _vote(BOB, b, true);
        _pastDeadline(b);
        reg.execute(a);
        vm.assertEq(_state(b), uint256(ExperienceRegistry.ProposalState.Stale), "stale state");
        vm.expectRevert(
            abi.encodeWithSelector(ExperienceRegistry.StaleBase.selector, LIB, ROOT1, uint64(1), bytes32(0), uint64(0))
        );
        reg.execute(b);
        vm.assertEq(reg.acceptedRoot(LIB), ROOT1, "first executed wins");
        vm.assertFalse(reg.getProposal(b).executed, "stale one not executed");
    }

    function test_StaleBaseCannotBeProposed() public {
        vm.expectRevert(
            abi.encodeWithSelector(ExperienceRegistry.StaleBase.selector, LIB, bytes32(0), uint64(0), ROOT1, uint64(1))
        );
        _propose(ALICE, LIB, ROOT1, 1, ROOT2, 2);
        uint256 id = _first();
        _vote(ALICE, id, true);
        _pastDeadline(id);
        reg.execute(id);
        // Right root, wrong version is stale too.
        vm.expectRevert(
            abi.encodeWithSelector(ExperienceRegistry.StaleBase.selector, LIB, ROOT1, uint64(1), ROOT1, uint64(0))
        );
        _propose(ALICE, LIB, ROOT1, 0, ROOT2, 2);
    }

    function test_InvalidVersionOrRootRejected() public {
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.InvalidVersion.selector, uint64(0), uint64(0)));
        _propose(ALICE, LIB, bytes32(0), 0, ROOT1, 0);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.InvalidRoot.selector, bytes32(0)));
        _propose(ALICE, LIB, bytes32(0), 0, bytes32(0), 1);
        uint256 id = _first();
        _vote(ALICE, id, true);
        _pastDeadline(id);
        reg.execute(id);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.InvalidRoot.selector, ROOT1));
        _propose(ALICE, LIB, ROOT1, 1, ROOT1, 2);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.InvalidVersion.selector, uint64(1), uint64(1)));
        _propose(ALICE, LIB, ROOT1, 1, ROOT3, 1);
    }

    // -------------------------------------------------------------- events --

    function test_EventsEmitted() public {
        uint64 deadline = uint64(block.timestamp) + PERIOD;
        vm.expectEmit(true, true, true, true, address(reg));
        emit ExperienceRegistry.ProposalCreated(1, LIB, ALICE, bytes32(0), ROOT1, 0, 1, deadline);
        uint256 id = _first();

        vm.expectEmit(true, true, true, true, address(reg));
        emit ExperienceRegistry.VoteCast(id, ALICE, true, 40 * UNIT);
        _vote(ALICE, id, true);
        vm.expectEmit(true, true, true, true, address(reg));
        emit ExperienceRegistry.VoteCast(id, BOB, false, 26 * UNIT);
        _vote(BOB, id, false); // 40 yes / 66 cast = 60.6%: not accepted yet
        vm.expectEmit(true, true, true, true, address(reg));
        emit ExperienceRegistry.VoteCast(id, CAROL, true, 34 * UNIT);
        _vote(CAROL, id, true); // 74 / 100

        _pastDeadline(id);
        vm.expectEmit(true, true, true, true, address(reg));
        emit ExperienceRegistry.ProposalExecuted(id, LIB, bytes32(0), ROOT1, 1);
        reg.execute(id);

        vm.expectEmit(true, true, true, true, address(reg));
        emit ExperienceRegistry.QuorumChanged(QUORUM_BPS, 3300);
        reg.setQuorumBps(3300);
        vm.expectEmit(true, true, true, true, address(reg));
        emit ExperienceRegistry.VotingPeriodChanged(PERIOD, 3 days);
        reg.setVotingPeriod(3 days);
        vm.expectEmit(true, true, true, true, address(reg));
        emit ExperienceRegistry.OwnershipTransferred(address(this), BOB);
        reg.transferOwnership(BOB);
    }

    function test_RejectedCallsEmitNothing() public {
        uint256 id = _first();
        _vote(ALICE, id, true);
        vm.recordLogs();
        vm.prank(ALICE);
        (bool ok,) = address(reg).call(abi.encodeCall(reg.vote, (id, true)));
        vm.assertFalse(ok, "double vote reverted");
        (ok,) = address(reg).call(abi.encodeCall(reg.execute, (id)));
        vm.assertFalse(ok, "early execute reverted");
        Vm.Log[] memory logs = vm.getRecordedLogs();
        vm.assertEq(logs.length, 0, "no events from rejected calls");
    }

    function test_ConstructorValidates() public {
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.ZeroAddress.selector));
        new ExperienceRegistry(IVotesToken(address(0)), 0, 1);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.InvalidQuorum.selector, uint16(10001)));
        new ExperienceRegistry(IVotesToken(address(token)), 10001, 1);
        vm.expectRevert(abi.encodeWithSelector(ExperienceRegistry.InvalidVotingPeriod.selector, uint64(0)));
        new ExperienceRegistry(IVotesToken(address(token)), 0, 0);
    }
}
